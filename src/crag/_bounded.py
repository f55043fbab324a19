"""Waiting on a database with a limit that holds even when it does not answer (the run store,
the grade cache on PostgreSQL).

`asyncio.wait_for` cancels what it waited for and then waits for the cancellation to finish.
asyncpg, cancelled mid-query on a frozen PostgreSQL (SIGSTOP, a hung host), opens a second
connection to ask the server to cancel, and that waits too: /health hung for 30 s behind a
"2 s" probe. Here the wait is given up, not the work: the operation goes on in the background
until the store answers or its own connection gives up, and the caller hears at once that
the store did not answer in time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from crag.errors import CragError

T = TypeVar("T")

_LEFT: set[asyncio.Future[object]] = set()  # held, so that a left task is not collected mid-way


class StoreTimeout(CragError, TimeoutError):
    """The store did not answer within the limit (a `TimeoutError` too, as callers catch it)."""


def store_errors() -> tuple[type[Exception], ...]:
    """What a database crag keeps state in (the run store, the grade cache) raises when it is
    down, frozen, full, locked or refuses: sqlite3's and asyncpg's errors, OSError (a refused or
    lost connection, a timeout, `StoreTimeout`), and ValueError (a URL it cannot use, a stored
    record it cannot read). Anything else is a bug of crag's, not the store's state."""
    import sqlite3

    import asyncpg

    return (sqlite3.Error, asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError,
            OSError, asyncio.TimeoutError, ValueError)


async def given_up_after(seconds: float, work: Awaitable[T], what: str) -> T:
    """`await work`, or `StoreTimeout(what ...)` after `seconds`, leaving `work` running."""
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if done:
        return task.result()
    _LEFT.add(task)
    task.add_done_callback(_forget)
    raise StoreTimeout(f"{what} did not answer within {seconds:g} s")


def _forget(task: asyncio.Future[object]) -> None:
    _LEFT.discard(task)
    if not task.cancelled():
        task.exception()  # read, so that asyncio does not log it: the caller already heard
