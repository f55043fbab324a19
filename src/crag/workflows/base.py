"""What the corrective and plain workflows share: the query check, each step's trace record,
the run's trace, and `ask`.

    class MyWorkflow(RecordedWorkflow):
        @step
        async def answer(self, ctx: Context[RecordedState], ev: QueryStartEvent) -> StopEvent:
            query = check_query(ev.query)
            await ctx.store.set("started", perf_counter())
            async with recording(ctx, "answer", ev) as record:
                ...
            trace = run_trace(await ctx.store.get_state(), query, verdict=None)

A step's record is written under its own key of the run state (`ctx.store.set`), which
copies two containers; an `edit_state` block would deep-copy every record and grade so far,
once per step. Each step also reads the run's start from the state once. See
benchmarks/throughput.py for what a run costs the server.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from time import perf_counter
from typing import Any

from pydantic import BaseModel, Field
from workflows import Context, Workflow

from crag._compat.workflows import CachedStepLookup
from crag._offload import run_sync
from crag.budget import Budget, current_budget, spending
from crag.config import BudgetSettings
from crag.cost import CostRecord, cost_of
from crag.errors import CragError, QueryError, StepError
from crag.events import CragResult, StepProgressEvent
from crag.text import as_typed
from crag.trace import (
    RunTrace,
    StepRecord,
    attributing_calls_to,
    describe,
    install_llm_call_counter,
)

MAX_QUERY_CHARS = 4000


class RecordedState(BaseModel):
    """What every run remembers between steps: when it started and each step's record."""

    started: float = 0.0
    records: dict[str, StepRecord] = Field(default_factory=dict)
    asked: str | None = None  # a follow-up as asked, before it was made standalone


class RecordedWorkflow(CachedStepLookup, Workflow):
    """A workflow whose runs record a trace and their cost; `ask` runs one synchronously.

    Args:
        budget: limits on each run's model calls, tokens and seconds (none by default); a
            model wrapped in `crag.models.BudgetedLLM` is refused a call past them.
        price_in, price_out: prices per million prompt and completion tokens, for the money in
            each run's cost record.
        fallback_seconds: seconds of each run kept for the offline components: model calls end
            by the run's deadline, `timeout` less this (at most half of it).
        **kwargs: passed to `Workflow` (e.g. `timeout`, 300 s unless given).
    """

    def __init__(
        self,
        *,
        budget: BudgetSettings | None = None,
        price_in: float | None = None,
        price_out: float | None = None,
        fallback_seconds: float = 10.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("timeout", 300.0)
        super().__init__(**kwargs)
        self.run_timeout: float | None = kwargs["timeout"]
        self.fallback_seconds = fallback_seconds
        self.budget = budget or BudgetSettings()
        self.price_in = price_in
        self.price_out = price_out
        install_llm_call_counter()

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Start a run with a budget of its own: the engine starts the run's tasks here, and
        each takes the budget with it (a context variable), so every step charges the same one."""
        token = _steps_running.set(_StepsRunning())
        try:
            with spending(self.new_budget()):
                return super().run(*args, **kwargs)
        finally:
            _steps_running.reset(token)

    def new_budget(self) -> Budget:
        """A fresh budget at this workflow's limits, for one run (or one MCP `search`), with the
        run's deadline for model calls: its timeout less the time kept for the offline
        components (`fallback_seconds`, at most half the timeout)."""
        limits = self.budget
        budget = Budget(calls=limits.calls, tokens=limits.tokens, seconds=limits.seconds)
        if self.run_timeout is not None:
            budget.deadline = budget.started + self.run_timeout - min(self.fallback_seconds, self.run_timeout / 2)
        return budget

    def run_cost(self, trace: RunTrace) -> CostRecord:
        """The run's cost record: calls, tokens and cache hits per step, money at the set prices,
        and the trace's notes (the budget's, when it changed what the run did)."""
        return cost_of(trace.steps, price_in=self.price_in, price_out=self.price_out, notes=trace.notes)

    def result(self, trace: RunTrace, **fields: Any) -> CragResult:
        """The run's result: `fields` (query, answer, verdict, grades, sources...) and what its
        trace says of it: timings, steps, degraded notes and cost."""
        return CragResult(
            timings={r.name: round(r.seconds, 6) for r in trace.steps}, steps=trace.step_names(),
            trace=trace, degraded=trace.degraded, cost=self.run_cost(trace), **fields,
        )

    def ask(self, query: str) -> CragResult:
        """Run synchronously; works inside a running event loop too (e.g. a notebook cell)."""
        return run_sync(lambda: self.run(query=query))

    def _repr_html_(self) -> str | None:
        """In Jupyter, the workflow's graph: every possible flow, inline SVG, nothing fetched."""
        from crag.display import html

        return html("workflow", self)


def check_query(query: str) -> str:
    """The question as people type it (`crag.text.as_typed`: what ingest did to the documents'
    text) with its whitespace collapsed; QueryError if empty or too long."""
    words = " ".join(as_typed(query).split())
    if not words:
        raise QueryError("The question is empty; ask something.")
    if len(words) > MAX_QUERY_CHARS:
        raise QueryError(
            f"The question is {len(words)} characters long; the limit is {MAX_QUERY_CHARS}."
        )
    return words


@asynccontextmanager
async def recording(ctx: Context[Any], name: str, ev: Any) -> AsyncIterator[StepRecord]:
    """Record the step's work in the run's trace, and announce it on the event stream.

    LLM calls made inside the block are counted on the record; the block marks the
    events it emits with `record.emit(event)`. A component's error other than a
    `CragError` becomes a `StepError` naming the step.
    """
    # One turn of the loop between the engine's start of the step and the step's own start:
    # when twenty runs enter a step together, asyncio would otherwise run both parts for all
    # twenty in one turn, and a timer due meanwhile waits for the whole turn
    # (`benchmarks/event_loop.py`; figures in docs/measured.md).
    await asyncio.sleep(0)
    ctx.write_event_to_stream(StepProgressEvent(step=name, status="started"))
    running = _steps_running.get()
    if running is not None:
        running.enter()
    started = await ctx.store.get("started")
    record = StepRecord(name=name, input_event=type(ev).__name__, started=perf_counter() - started)
    try:
        with attributing_calls_to(record, origin=started):
            yield record
    except CragError as exc:
        record.error = describe(exc)
        raise
    except Exception as exc:  # any other failure: re-raised naming the step
        record.error = describe(exc)
        raise StepError(name, exc) from exc
    finally:
        record.ended = perf_counter() - started
        await ctx.store.set(f"records.{name}", record)
        if running is not None:
            running.leave()
        ctx.write_event_to_stream(
            StepProgressEvent(step=name, status="finished", seconds=record.seconds, record=record)
        )


class _StepsRunning:
    """How many of one run's steps are inside `recording` now, and an event set when none is."""

    def __init__(self) -> None:
        self.count = 0
        self.idle = asyncio.Event()
        self.idle.set()

    def enter(self) -> None:
        self.count += 1
        self.idle.clear()

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0:
            self.idle.set()


_steps_running: contextvars.ContextVar[_StepsRunning | None] = contextvars.ContextVar(
    "crag_steps_running", default=None
)


# How long a finished answer waits for a speculative step still calling the model.
SETTLE_SECONDS = 2.0


async def other_steps_finished() -> bool:
    """Wait until no other step of this run is still working, at most `SETTLE_SECONDS`; False
    if one still is. A speculative rewrite whose model call is in flight when the answer is
    ready has been paid for, so the run's trace and cost should count it; usually nothing is
    running and this returns at once, but a model that hangs must not hold a ready answer."""
    running = _steps_running.get()
    if running is None or running.idle.is_set():
        return True
    try:
        await asyncio.wait_for(running.idle.wait(), SETTLE_SECONDS)
    except asyncio.TimeoutError:
        return False
    return True


def run_trace(state: RecordedState, query: str, verdict: str | None) -> RunTrace:
    """The run's trace from the records its steps wrote, in the order they started, with the
    budget's note when it refused a model call."""
    budget = current_budget()
    notes = budget.notes() if budget is not None else []
    return RunTrace(
        query=query,
        asked=state.asked,
        verdict=verdict,
        seconds=perf_counter() - state.started,
        steps=sorted(state.records.values(), key=lambda r: r.started),
        notes=notes,
    )


