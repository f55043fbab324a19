"""Keeping the event loop free: load before the first step, compute off the loop.

`warm_up(*components)` loads what components would otherwise load lazily in a step;
`off_loop(function, ...)` runs a step's CPU-bound work in a few threads shared by every run;
`run_sync(start)` runs async work to completion from synchronous code;
`hold_collection()` and `settle_heap()` keep the garbage collector off what is loaded for good,
for the processes that choose it (the garbage collector's settings are the whole process's).

Why not `asyncio.to_thread`: its default executor has up to `cores + 4` threads, and more
Python threads than cores only fight over the GIL, which the event-loop thread then waits
for too: one worker per core kept the loop's timers less late and concurrent runs quicker
(`benchmarks/event_loop.py --executor pool|to_thread`; figures in docs/measured.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import gc
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

WORKERS = max(os.cpu_count() or 1, 1)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """The process's pool, made on first use (a process that never runs a step starts no thread)."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="crag-cpu")
    return _pool


async def off_loop(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`function(*args, **kwargs)` in the shared pool, awaited from the running loop.

    Context variables travel with it, as with `asyncio.to_thread`: the run's trace record
    (`crag.trace.note_degraded`) is found from the worker thread too.
    """
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, function, *args, **kwargs)
    return await loop.run_in_executor(_executor(), call)


def warm_up(*components: object) -> None:
    """Call `warm_up()` on each component that has one (`crag.interfaces.WarmsUp`); lists and
    tuples are walked."""
    from crag.interfaces import WarmsUp  # the step protocols import llama-index: not at start-up

    for component in components:
        if isinstance(component, (list, tuple)):
            warm_up(*component)
            continue
        if isinstance(component, WarmsUp):
            component.warm_up()


_collection_held = False


def hold_collection() -> None:
    """Collect no garbage until `settle_heap()` or `resume_collection()`: for a process about to
    import and load a workflow, as `crag ask`, `crag mcp` and `crag serve` are.

    Start-up makes some 300k objects that live for good, and the collector walked them over and
    over as they came: about a fifth of a cold start (`benchmarks/cold_start.py`). Little of
    it is garbage (a few thousand objects), and what is stays frozen with the rest.
    """
    global _collection_held
    if gc.isenabled():
        gc.disable()
        _collection_held = True


def resume_collection() -> None:
    """Turn the collector back on if `hold_collection` turned it off; otherwise do nothing."""
    global _collection_held
    if _collection_held:
        _collection_held = False
        gc.enable()


_heap_settled = False
SERVING_THRESHOLDS = (10_000, 50, 100)  # gc.set_threshold's, for a process that serves runs


def settle_heap() -> None:
    """Tune Python's garbage collector for a process that serves runs, once its workflow is built.

    Process-wide, so the library never calls it (`build_workflow` does not): `crag serve`,
    `crag ask` and `crag mcp` call it because they own their process, and a web app or a
    worker of your own may choose to. The first call in a process moves every object alive
    now out of the cyclic collector's reach (`gc.freeze`) and makes its passes rarer
    (`gc.set_threshold` with `SERVING_THRESHOLDS`); later calls change nothing. Every call
    turns the collector back on if `hold_collection` had turned it off.

    Why: once a workflow is loaded, most of the heap is imported code (~150k objects:
    llama-index, pydantic, the engine) that lives as long as the process. A full collection
    walks all of it, and it runs on the event loop's thread: with 20 runs at once it held the
    loop up to ~100 ms, under 20 ms once settled (`benchmarks/event_loop.py`, figures in
    docs/measured.md).

    The cost: frozen objects are still freed when nothing refers to them, but a frozen
    reference cycle never is. A workflow is one, so the workflow alive at the first call stays
    in memory for good, even once replaced (a reload, a notebook cell run again); hence the
    first call only, and workflows built after it are collected as usual: call it once the
    workflow you keep is built. The young generations are collected before freezing when the
    collector is on (cheap: they are small; while it is held everything is young, and that
    would be a full pass).

    Example:
        workflow = crag.build_workflow(settings)
        crag.settle_heap()  # this process serves runs from now on
    """
    global _heap_settled
    if not _heap_settled:
        _heap_settled = True
        if gc.isenabled():
            gc.collect(1)
        gc.freeze()
        # A larger young generation: a run's objects are short-lived, and what lives on (the
        # caches of strips, sentences and grades, tens of thousands of objects) is walked by
        # every full pass; with the defaults those came every few runs.
        gc.set_threshold(*SERVING_THRESHOLDS)
    resume_collection()


def run_sync(start: Callable[[], Awaitable[T]]) -> T:
    """Run `start()` to completion from synchronous code, with or without a running loop.

    Inside a running loop (Jupyter), the work runs on a fresh loop in a worker thread
    rather than patching the running loop re-entrantly as nest_asyncio does.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await(start))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _await(start)).result()


async def _await(start: Callable[[], Awaitable[T]]) -> T:
    return await start()


_background: set[asyncio.Task] = set()


def in_background(work: Coroutine[Any, Any, Any]) -> None:
    """Run `work` without waiting for it: kept referenced until done; a failure is dropped,
    since whatever needed the work does it again (a speculative step)."""
    task = asyncio.ensure_future(work)
    _background.add(task)
    task.add_done_callback(lambda done: (_background.discard(done), done.cancelled() or done.exception()))
