"""The Corrective-RAG workflow (Yan et al., 2024) as typed events between async steps.

    retrieve ─▶ postprocess ─▶ grade ─┬─ Correct ───▶ refine_internal ─────────────────┐
                                      ├─ Ambiguous ─▶ both branches, concurrently ──────┼─▶ synthesize
                                      └─ Incorrect ─▶ rewrite ─▶ web_search ─▶ refine_web ┘

`postprocess` runs the configured stages (cutoffs, keyword filters, sentence windows,
reranking, reordering) on what was retrieved; with none, it passes the chunks through.

The rewrite is speculative by default: it starts with grading rather than after it, so
an Incorrect verdict costs two model round trips in sequence (grade ∥ rewrite, then
synthesize) instead of three. The web search itself waits for the verdict, so a Correct
run never searches. Each step calls one component.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from time import perf_counter
from typing import Any, TypeVar

from pydantic import BaseModel, Field
from workflows import Context, Workflow, step
from workflows.events import StopEvent

from crag.config import GraderSettings
from crag.errors import ConfigError, CragError, QueryError, StepError, redact
from crag.events import (
    CandidatesEvent,
    CragResult,
    Grade,
    InternalKnowledgeEvent,
    QueryStartEvent,
    RefineInternalEvent,
    RetrievedEvent,
    RewriteQueryEvent,
    RewrittenQueryEvent,
    StepProgressEvent,
    Verdict,
    WebKnowledgeEvent,
    WebResultsEvent,
    WebSearchNeededEvent,
)
from crag.interfaces import Grader, Postprocessor, QueryRewriter, Refiner, Retriever, Synthesizer, WebSearch
from crag.steps.grading import decide_verdict
from crag.steps.postprocessing import apply_postprocessors
from crag.steps.rewriting import KeywordRewriter
from crag.steps.synthesis import ExtractiveSynthesizer
from crag.trace import RunTrace, StepRecord, attributing_calls_to, install_llm_call_counter

MAX_QUERY_CHARS = 4000
_DEFAULT_GRADES = GraderSettings()  # thresholds calibrated on the dev sets (crag calibrate)
T = TypeVar("T")

# Which refined knowledge synthesis waits for, by verdict.
_AWAITED = {
    Verdict.CORRECT: [InternalKnowledgeEvent],
    Verdict.INCORRECT: [WebKnowledgeEvent],
    Verdict.AMBIGUOUS: [InternalKnowledgeEvent, WebKnowledgeEvent],
}


class RunState(BaseModel):
    """What one run remembers between steps (kept in the engine's context store)."""

    query: str = ""
    verdict: Verdict | None = None
    grades: list[Grade] = Field(default_factory=list)
    rewritten_query: str | None = None
    started: float = 0.0
    records: list[StepRecord] = Field(default_factory=list)


class CorrectiveRAGWorkflow(Workflow):
    """Corrective RAG: grade what was retrieved, and correct course with a web search.

    Args:
        retriever, grader, refiner, rewriter, web_search, synthesizer: the components,
            anything satisfying the Protocols in `crag.interfaces`.
        postprocessors: stages run in order on the retrieved chunks before grading
            (`crag.steps.postprocessing`); none passes them through.
        upper: some chunk scoring at least this makes the verdict Correct.
        lower: every chunk scoring below this makes it Incorrect; in between, Ambiguous.
        speculative_rewrite: start the query rewrite alongside grading (default) rather
            than after an Incorrect or Ambiguous verdict; wasted only on Correct runs.
        fallback_rewriter, fallback_synthesizer: stand in when the rewriter or synthesizer
            fails (an LLM that is down), so the run still answers; the result's
            `degraded` list says so. Default: the offline keyword rewriter and extractive
            synthesizer.
        **kwargs: passed to `Workflow` (e.g. `timeout`).
    """

    def __init__(
        self,
        *,
        retriever: Retriever,
        grader: Grader,
        refiner: Refiner,
        rewriter: QueryRewriter,
        web_search: WebSearch,
        synthesizer: Synthesizer,
        postprocessors: Sequence[Postprocessor] = (),
        upper: float = _DEFAULT_GRADES.upper,
        lower: float = _DEFAULT_GRADES.lower,
        speculative_rewrite: bool = True,
        fallback_rewriter: QueryRewriter | None = None,
        fallback_synthesizer: Synthesizer | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("timeout", 300.0)
        super().__init__(**kwargs)
        if lower > upper:
            raise ConfigError(f"lower threshold ({lower}) must not exceed upper ({upper})")
        self.retriever = retriever
        self.grader = grader
        self.refiner = refiner
        self.rewriter = rewriter
        self.searcher = web_search  # not `web_search`: that name is the step
        self.synthesizer = synthesizer
        self.postprocessors = list(postprocessors)
        self.upper = upper
        self.lower = lower
        self.speculative_rewrite = speculative_rewrite
        self.fallback_rewriter = fallback_rewriter or KeywordRewriter()
        self.fallback_synthesizer = fallback_synthesizer or ExtractiveSynthesizer()
        install_llm_call_counter()

    @step
    async def retrieve(
        self, ctx: Context[RunState], ev: QueryStartEvent
    ) -> CandidatesEvent | RewriteQueryEvent:
        """Find candidate chunks in the user's documents."""
        query = " ".join(ev.query.split())
        if not query:
            raise QueryError("The question is empty; ask something.")
        if len(query) > MAX_QUERY_CHARS:
            raise QueryError(f"The question is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}.")
        async with ctx.store.edit_state() as state:
            state.query, state.started = query, perf_counter()
        async with _recording(ctx, "retrieve", ev) as record:
            if self.speculative_rewrite:
                ctx.send_event(record.emit(RewriteQueryEvent(query=query)))
            chunks = await self.retriever.retrieve(query)
            return record.emit(CandidatesEvent(query=query, chunks=chunks))

    @step
    async def postprocess(self, ctx: Context[RunState], ev: CandidatesEvent) -> RetrievedEvent:
        """Run the postprocessing stages on the candidates, in order (none: pass them on)."""
        async with _recording(ctx, "postprocess", ev) as record:
            chunks = await apply_postprocessors(self.postprocessors, ev.query, ev.chunks)
            return record.emit(RetrievedEvent(query=ev.query, chunks=chunks))

    @step
    async def grade(
        self, ctx: Context[RunState], ev: RetrievedEvent
    ) -> RefineInternalEvent | WebSearchNeededEvent | RewriteQueryEvent:
        """Score every chunk and decide Correct, Incorrect or Ambiguous."""
        async with _recording(ctx, "grade", ev) as record:
            grades = await self.grader.grade(ev.query, ev.chunks)
            verdict = decide_verdict(grades, self.upper, self.lower)
            async with ctx.store.edit_state() as state:
                state.grades, state.verdict = list(grades), verdict
            fallbacks = [g for g in grades if g.note]
            if fallbacks:
                record.degraded = f"{len(fallbacks)} of {len(grades)} grades by a fallback ({fallbacks[0].note})"
            kept = [c for c, g in zip(ev.chunks, grades) if g.score >= self.lower]
            if verdict is Verdict.CORRECT:
                return record.emit(RefineInternalEvent(query=ev.query, chunks=kept))
            if verdict is Verdict.AMBIGUOUS:
                ctx.send_event(record.emit(RefineInternalEvent(query=ev.query, chunks=kept)))
            if not self.speculative_rewrite:
                ctx.send_event(record.emit(RewriteQueryEvent(query=ev.query)))
            # Incorrect runs answer from these if the web search fails.
            fallback = list(ev.chunks) if verdict is Verdict.INCORRECT else []
            return record.emit(WebSearchNeededEvent(query=ev.query, fallback=fallback))

    @step
    async def refine_internal(self, ctx: Context[RunState], ev: RefineInternalEvent) -> InternalKnowledgeEvent:
        """Keep the relevant strips of the kept internal chunks."""
        async with _recording(ctx, "refine_internal", ev) as record:
            strips = await self.refiner.refine(ev.query, ev.chunks)
            return record.emit(InternalKnowledgeEvent(strips=strips))

    @step
    async def rewrite(self, ctx: Context[RunState], ev: RewriteQueryEvent) -> RewrittenQueryEvent:
        """Turn the question into a web search query."""
        async with _recording(ctx, "rewrite", ev) as record:
            try:
                search_query = await self.rewriter.rewrite(ev.query)
            except Exception as exc:  # noqa: BLE001 - any rewriter failure has the same remedy
                record.degraded = f"rewriter failed ({_describe(exc)}); used keywords"
                search_query = await self.fallback_rewriter.rewrite(ev.query)
            await ctx.store.set("rewritten_query", search_query)
            return record.emit(RewrittenQueryEvent(query=ev.query, search_query=search_query))

    @step
    async def web_search(
        self, ctx: Context[RunState], ev: RewrittenQueryEvent | WebSearchNeededEvent
    ) -> WebResultsEvent | None:
        """Search outside the user's documents, once the verdict asks for it."""
        ready = ctx.collect_events(ev, [RewrittenQueryEvent, WebSearchNeededEvent])
        if ready is None:
            return None
        rewritten, needed = ready
        async with _recording(ctx, "web_search", ev) as record:
            record.search_calls += 1
            try:
                results = await self.searcher.search(rewritten.search_query)
            except Exception as exc:  # noqa: BLE001 - a search outage must not lose the run
                # Ambiguous runs already use internal knowledge; Incorrect ones fall back to it.
                results = needed.fallback
                record.degraded = f"web search failed ({_describe(exc)}); answered from internal knowledge"
            return record.emit(WebResultsEvent(query=rewritten.query, results=results))

    @step
    async def refine_web(self, ctx: Context[RunState], ev: WebResultsEvent) -> WebKnowledgeEvent:
        """Keep the relevant strips of the web results."""
        async with _recording(ctx, "refine_web", ev) as record:
            strips = await self.refiner.refine(ev.query, ev.results)
            return record.emit(WebKnowledgeEvent(strips=strips))

    @step
    async def synthesize(
        self, ctx: Context[RunState], ev: InternalKnowledgeEvent | WebKnowledgeEvent
    ) -> StopEvent | None:
        """Wait for the knowledge the verdict promised, then write the cited answer."""
        state = await ctx.store.get_state()
        ready = ctx.collect_events(ev, _AWAITED[state.verdict])
        if ready is None:
            return None
        strips = [s for knowledge in ready for s in knowledge.strips]
        async with _recording(ctx, "synthesize", ev) as record:
            try:
                answer, sources = await self.synthesizer.synthesize(state.query, strips)
                if not answer.strip():
                    raise ValueError("it returned an empty answer")
            except Exception as exc:  # noqa: BLE001 - any synthesizer failure has the same remedy
                record.degraded = f"synthesizer failed ({_describe(exc)}); extractive answer"
                answer, sources = await self.fallback_synthesizer.synthesize(state.query, strips)
            record.output_events.append(StopEvent.__name__)
        state = await ctx.store.get_state()
        trace = RunTrace(
            query=state.query,
            verdict=state.verdict.value,
            seconds=perf_counter() - state.started,
            steps=sorted(state.records, key=lambda r: r.started),
        )
        return StopEvent(
            result=CragResult(
                query=state.query,
                answer=answer,
                verdict=state.verdict,
                grades=state.grades,
                sources=sources,
                rewritten_query=state.rewritten_query if state.verdict is not Verdict.CORRECT else None,
                timings={r.name: round(r.seconds, 6) for r in trace.steps},
                steps=trace.step_names(),
                trace=trace,
                degraded=trace.degraded,
            )
        )

    def ask(self, query: str) -> CragResult:
        """Run synchronously; works inside a running event loop too (e.g. a notebook cell)."""
        return run_sync(lambda: self.run(query=query))


@asynccontextmanager
async def _recording(ctx: Context[RunState], name: str, ev: Any) -> AsyncIterator[StepRecord]:
    """Record the step's work in the run's trace, and announce it on the event stream.

    LLM calls made inside the block are counted on the record; the block marks the
    events it emits with `record.emit(event)`.
    """
    ctx.write_event_to_stream(StepProgressEvent(step=name, status="started"))
    started = await ctx.store.get("started")
    record = StepRecord(name=name, input_event=type(ev).__name__, started=perf_counter() - started)
    try:
        with attributing_calls_to(record):
            yield record
    except CragError as exc:
        record.error = _describe(exc)
        raise
    except Exception as exc:
        record.error = _describe(exc)
        raise StepError(name, exc) from exc
    finally:
        record.ended = perf_counter() - started
        async with ctx.store.edit_state() as state:
            state.records.append(record)
        ctx.write_event_to_stream(
            StepProgressEvent(step=name, status="finished", seconds=record.seconds, record=record)
        )


def _describe(exc: BaseException) -> str:
    """One line for the trace and `degraded`, without API keys (an error body may echo one)."""
    return redact(f"{type(exc).__name__}: {exc}")[:300]


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
