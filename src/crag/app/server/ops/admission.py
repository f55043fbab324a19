"""Admission control: at most `[server] max_runs` runs in flight, the next `max_queue` run
requests waiting first come first served, and beyond that a 503 with `Retry-After`.

Without a cap, every request starts a run at once: under a burst each run gets a thinner
slice of the one event loop (and of the model server), and all of them pass their timeout
together. With it, admitted runs keep their pace and finish within their timeout, and the
rest are told at once when to come back.

A slot is taken when a run is admitted and given back when the run ends, not when the
response is sent: `run-nowait` answers at once while its run goes on. `crag.app.runs`
takes and gives back the slots, for every door.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque


class Slot:
    """One admitted run's place; given back once."""

    __slots__ = ("_admission", "_released", "_since")

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._released = False
        self._since = time.monotonic()

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._admission._release(time.monotonic() - self._since)


class Admission:
    """The counter and the FIFO queue. All on the event loop's thread, so no lock is needed."""

    def __init__(self, max_runs: int, max_queue: int, max_wait: float) -> None:
        self.max_runs = max_runs
        self.max_queue = max_queue
        self.max_wait = max_wait
        self.running = 0
        self.refused = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._mean_run = 1.0  # seconds, a moving average, for Retry-After

    @property
    def queued(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def acquire(self) -> Slot | None:
        """A slot, after waiting in line if need be; None when the line is full or too slow."""
        if self.running < self.max_runs and not self.queued:
            self.running += 1
            return Slot(self)
        if self.queued >= self.max_queue:
            self.refused += 1
            return None
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.max_wait)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            if waiter.done() and not waiter.cancelled():
                self._release(None)  # the slot came as we gave up: pass it on
            else:
                waiter.cancel()
            if isinstance(exc, asyncio.CancelledError):
                raise
            self.refused += 1
            return None
        return Slot(self)  # `running` was kept up by the run that handed its slot over

    def retry_after(self) -> int:
        """Seconds until a place is likely free: the queue ahead, at the recent pace."""
        return max(1, math.ceil(self._mean_run * (self.queued + 1) / self.max_runs))

    def _release(self, held: float | None) -> None:
        if held is not None:
            self._mean_run = 0.8 * self._mean_run + 0.2 * held
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes straight to the next in line
                return
        self.running -= 1
