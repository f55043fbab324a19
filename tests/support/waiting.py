"""Bounded waits: each fails the test when what it waits on never comes, a guard against a hang
(a timeout not honoured), never a measure of speed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


async def finishes(awaitable: Awaitable[T], within: float = 10.0) -> T:
    """`await awaitable`, failing the test if it has not ended after `within` seconds."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=within)
    if not done:
        task.cancel()
        pytest.fail(f"still running after {within:g} s: it hangs")
    return task.result()


async def wait_for(predicate: Callable[[], bool], seconds: float = 10.0) -> None:
    """Poll `predicate` until it holds; an AssertionError after `seconds`."""
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out waiting")
