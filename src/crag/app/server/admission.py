"""Admission control: at most `[server] max_runs` runs in flight, the next `max_queue` run
requests waiting first come first served, and beyond that a 503 with `Retry-After`.

Without a cap, every request starts a run at once: under a burst each run gets a thinner
slice of the one event loop (and of the model server), and all of them pass their timeout
together. With it, admitted runs keep their pace and finish within their timeout, and the
rest are told at once when to come back.

A slot is taken when a run request is admitted and given back when the run ends, not when
the response is sent: `run-nowait` answers at once while its run goes on. The request's
slot travels in a context variable to `Workflow.run`, which `track_runs` wraps on the one
served workflow instance (a public method; the server calls it in the request's own task),
to give the slot back when the run's handler says it has ended (`stop_event_result()`).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import re
import time
from collections import deque
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from workflows import Workflow

RUN_PATH = re.compile(r"^/workflows/[^/]+/run(?:-nowait)?$")


class Slot:
    """One admitted run request's place; given back once, by the request or by its run."""

    __slots__ = ("_admission", "_taken_by_run", "_released", "_since")

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._taken_by_run = False
        self._released = False
        self._since = time.monotonic()

    @property
    def taken_by_run(self) -> bool:
        return self._taken_by_run

    def hand_to_run(self) -> bool:
        if self._taken_by_run or self._released:
            return False
        self._taken_by_run = True
        return True

    def release(self, *_: Any) -> None:
        if not self._released:
            self._released = True
            self._admission._release(time.monotonic() - self._since)


_SLOT: contextvars.ContextVar[Slot | None] = contextvars.ContextVar("crag_admission_slot", default=None)


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


def track_runs(workflow: Workflow, live: set[str] | None = None) -> None:
    """Make each run started by an admitted request give its slot back when it ends, and
    keep `live` (run ids) to the runs this process is running."""
    start = workflow.run

    def run(*args: Any, **kwargs: Any) -> Any:
        handler = start(*args, **kwargs)
        slot = _SLOT.get()
        if slot is not None and not slot.hand_to_run():
            slot = None
        if live is not None or slot is not None:
            task = asyncio.create_task(_release_at_end(handler, slot, live))
            _WATCHERS.add(task)
            task.add_done_callback(_WATCHERS.discard)
        return handler

    workflow.run = run  # type: ignore[method-assign]


_WATCHERS: set[asyncio.Task[None]] = set()  # held, so that a pending watcher is not collected


async def _release_at_end(handler: Any, slot: Slot | None, live: set[str] | None) -> None:
    if live is not None:
        live.add(handler.run_id)
    try:
        await handler.stop_event_result()  # public; raises if the run failed or was cancelled
    except BaseException:  # noqa: BLE001 - however the run ended, its slot is free
        pass
    finally:
        if slot is not None:
            slot.release()
        if live is not None:
            live.discard(handler.run_id)


class AdmissionMiddleware:
    """Run requests wait for a slot; anything else passes straight through."""

    def __init__(self, app: ASGIApp, admission: Admission) -> None:
        self.app = app
        self.admission = admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not RUN_PATH.match(scope["path"]):
            await self.app(scope, receive, send)
            return
        slot = await self.admission.acquire()
        if slot is None:
            retry = self.admission.retry_after()
            response = JSONResponse(
                {"detail": f"The server is busy ({self.admission.max_runs} runs in flight, "
                           f"{self.admission.max_queue} waiting); ask again in {retry} s."},
                status_code=503,
                headers={"Retry-After": str(retry)},
            )
            await response(scope, receive, send)
            return
        token = _SLOT.set(slot)
        try:
            await self.app(scope, receive, send)
        finally:
            _SLOT.reset(token)
            if not slot.taken_by_run:
                slot.release()  # no run was started (a 400, a failure): the slot is free again
