"""One thread that owns the SQLite run store's connection and runs its jobs in the order given.

The store's reads and writes were SQLite calls on the event loop's thread: each a few
hundred microseconds, and each commit (or a wait for another process's lock, up to 30 s)
held up every request and every run meanwhile. Here the loop only queues a job: a write it
need not wait for (an event) is queued and forgotten; a read, or a write whose failure its
caller must see (a handler's status), is awaited. One thread, one connection, one queue:
jobs run in the order they were queued, so a read queued after a write sees it (committed
or not: the same connection).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
logger = logging.getLogger(__name__)
_STOP = object()


class StoreThread:
    """Runs `put` and `call` jobs one at a time, in order, on a thread of its own."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def put(self, job: Callable[..., Any], *args: Any) -> None:
        """Queue `job(*args)` and go on; a failure is logged (nobody is waiting to hear it)."""
        self._jobs.put((job, args, None, None))

    async def call(self, job: Callable[..., T], *args: Any) -> T:
        """Queue `job(*args)` and wait for its result, or its exception."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((job, args, loop, future))
        return await future

    def stop(self, last: Callable[[], Any] | None = None) -> None:
        """Run what is queued, then `last`, then end the thread (waits for it)."""
        if last is not None:
            self.put(last)
        self._jobs.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is _STOP:
                return
            job, args, loop, future = item
            try:
                result = job(*args)
            except BaseException as exc:  # handed to the waiter, or logged
                if future is None:
                    logger.exception("crag: a run store write failed")
                else:
                    _settle(loop, future, None, exc)
            else:
                if future is not None:
                    _settle(loop, future, result, None)


def _settle(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    exc: BaseException | None,
) -> None:
    def settle() -> None:
        if future.done():  # the waiter was cancelled meanwhile
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the loop has closed: nobody is waiting any more
        pass
