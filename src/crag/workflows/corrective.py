"""The Corrective-RAG workflow (Yan et al., 2024) as typed events between async steps.

    retrieve ─▶ postprocess ─▶ grade ─┬─ Correct ───▶ refine_internal ─────────────────┐
                                      ├─ Ambiguous ─▶ both branches, concurrently ──────┼─▶ synthesize
                                      └─ Incorrect ─▶ rewrite ─▶ web_search ─▶ refine_web ┘

`retrieve`, `postprocess` and `grade` are the three parts of one component,
`crag.steps.graded_retrieval.GradedRetrieval`, drawn as steps so a run shows each. Between the
knowledge and `synthesize`, `hop` follows a compound question's further hops with
`crag.steps.hopping.HopPlanner`, which grades each hop with the same component.

The rewrite is speculative by default: it starts with grading, so an Incorrect verdict costs
two model round trips in sequence (grade ∥ rewrite, then synthesize) instead of three. The web
search waits for the verdict, so a Correct run never searches. Each step calls one component.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from time import perf_counter
from typing import Any, ClassVar

from pydantic import Field
from workflows import Context, step
from workflows.events import StopEvent

from crag._offload import in_background
from crag.budget import by_deadline, current_budget
from crag.config import GraderSettings
from crag.events import (
    CandidatesEvent,
    Grade,
    InternalKnowledgeEvent,
    KnowledgeEvent,
    QueryStartEvent,
    RefineInternalEvent,
    RetrievedEvent,
    RewriteQueryEvent,
    RewrittenQueryEvent,
    Verdict,
    WebKnowledgeEvent,
    WebResultsEvent,
    WebSearchNeededEvent,
)
from crag.interfaces import (
    BridgeFinder,
    CoverageJudge,
    Decomposer,
    Grader,
    Postprocessor,
    PreparesStrips,
    QueryCondenser,
    QueryRewriter,
    Refiner,
    Retriever,
    Synthesizer,
    WebSearch,
    web_configured,
)
from crag.steps.condensing import RuleCondenser, standalone
from crag.steps.graded_retrieval import GradedRetrieval
from crag.steps.grading import context_of
from crag.steps.hopping import HopPlanner
from crag.steps.rewriting import KeywordRewriter
from crag.steps.synthesis import ExtractiveSynthesizer
from crag.trace import describe, or_fallback
from crag.workflows.answering import write_answer
from crag.workflows.base import (
    MAX_QUERY_CHARS,
    RecordedState,
    RecordedWorkflow,
    check_query,
    other_steps_finished,
    recording,
    run_trace,
)
from crag.workflows.explain import explain, no_web_note

__all__ = ["MAX_QUERY_CHARS", "CorrectiveRAGWorkflow", "RunState"]

_DEFAULT_GRADES = GraderSettings()  # the default `cover`; thresholds come from the grader (`thresholds_of`)

# Which refined knowledge synthesis waits for, by verdict.
_AWAITED = {
    Verdict.CORRECT: [InternalKnowledgeEvent],
    Verdict.INCORRECT: [WebKnowledgeEvent],
    Verdict.AMBIGUOUS: [InternalKnowledgeEvent, WebKnowledgeEvent],
}


class RunState(RecordedState):
    """What one run remembers between steps (kept in the engine's context store)."""

    query: str = ""
    verdict: Verdict | None = None
    grades: list[Grade] = Field(default_factory=list)
    coverage: float | None = None
    rewritten_query: str | None = None
    rewrite_started: bool = False  # the speculative rewrite was sent with retrieval


class CorrectiveRAGWorkflow(RecordedWorkflow):
    """Corrective RAG: grade what was retrieved, and correct course with a web search.

    Args:
        retriever, grader, refiner, rewriter, web_search, synthesizer: the components,
            anything satisfying the Protocols in `crag.interfaces`.
        postprocessors, upper, lower, judge, cover: how chunks are postprocessed and graded
            into a verdict: see `crag.steps.graded_retrieval.GradedRetrieval`.
        decomposer, bridger, fallback_decomposer: how further hops are planned: see
            `crag.steps.hopping.HopPlanner` (with neither of the first two, a run answers from
            the first pass only; `build_workflow` sets a bridger with the rule decomposer).
        speculative_rewrite: start the rewrite alongside grading (default), not after the
            verdict; wasted only on Correct runs.
        speculative_refine: score the strips of a refiner with `prepare` while grading
            (default), so refining after the verdict selects; wasted only on Incorrect runs.
        condenser: makes a follow-up (a run with `history`) standalone before retrieval;
            default, and fallback when it fails: the offline rules (`RuleCondenser`).
        fallback_rewriter, fallback_synthesizer: stand in when the rewriter or synthesizer
            fails (an LLM that is down), so the run still answers; the result's `degraded` list
            says so. Default: the offline keyword rewriter and extractive synthesizer.
        **kwargs: passed to `Workflow` (e.g. `timeout`, 300 s unless given).
    """

    # Which verdicts take each of grade's out-edges, for the pictures (crag.app.render).
    edge_labels: ClassVar[dict[tuple[str, str], str]] = {
        ("grade", "RefineInternalEvent"): "Correct · Ambiguous",
        ("grade", "WebSearchNeededEvent"): "Incorrect · Ambiguous",
        ("grade", "RewriteQueryEvent"): "if not speculative",
    }

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
        upper: float | None = None,
        lower: float | None = None,
        decomposer: Decomposer | None = None,
        judge: CoverageJudge | None = None,
        cover: float = _DEFAULT_GRADES.cover,
        speculative_rewrite: bool = True,
        speculative_refine: bool = True,
        fallback_rewriter: QueryRewriter | None = None,
        fallback_synthesizer: Synthesizer | None = None,
        fallback_decomposer: Decomposer | None = None,
        condenser: QueryCondenser | None = None,
        bridger: BridgeFinder | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.retrieval = GradedRetrieval(
            retriever, grader, postprocessors, upper=upper, lower=lower, judge=judge, cover=cover
        )
        self.refiner = refiner
        self.rewriter = rewriter
        self.searcher = web_search  # not `web_search`: that name is the step
        self.synthesizer = synthesizer
        self.speculative_rewrite = speculative_rewrite
        self.speculative_refine = speculative_refine
        self.fallback_rewriter = fallback_rewriter or KeywordRewriter()
        self.fallback_synthesizer = fallback_synthesizer or ExtractiveSynthesizer()
        self.condenser = condenser or RuleCondenser()
        self.hops = HopPlanner(
            self.retrieval, refiner, web_search,
            decomposer=decomposer, bridger=bridger, fallback_decomposer=fallback_decomposer,
        )

    # The graded retrieval's parts, read by the wiring, `crag eval` and the pictures.
    retriever = property(lambda self: self.retrieval.retriever)
    grader = property(lambda self: self.retrieval.grader)
    postprocessors = property(lambda self: self.retrieval.postprocessors)
    upper = property(lambda self: self.retrieval.upper)
    lower = property(lambda self: self.retrieval.lower)
    cover = property(lambda self: self.retrieval.cover)

    @step
    async def retrieve(
        self, ctx: Context[RunState], ev: QueryStartEvent
    ) -> CandidatesEvent | RewriteQueryEvent:
        """Find candidate chunks in the user's documents."""
        query = check_query(ev.query)
        async with ctx.store.edit_state() as state:  # the first write: nothing to copy yet
            state.query, state.started = query, perf_counter()
        async with recording(ctx, "retrieve", ev) as record:
            if ev.history:  # a follow-up: retrieval reads only the question, so it must stand alone
                alone = check_query(await standalone(self.condenser, query, ev.history, record))
                if alone != query:
                    await ctx.store.set("asked", query)
                    await ctx.store.set("query", alone)
                    query = alone
            budget = current_budget()
            calls_left = budget.calls_left() if budget is not None else None
            if self.speculative_rewrite and calls_left is None:
                await self._rewrite_now(ctx, record, query)
            chunks = await self.retrieval.retrieve(query)
            # A budget of calls pays for the rewrite ahead of the verdict only when it can also
            # pay for grading every chunk and the answer: those are the calls that matter.
            if self.speculative_rewrite and calls_left is not None and calls_left > len(chunks) + 1:
                await self._rewrite_now(ctx, record, query)
            return record.emit(CandidatesEvent(query=query, chunks=chunks))

    async def _rewrite_now(self, ctx: Context[RunState], record: Any, query: str) -> None:
        await ctx.store.set("rewrite_started", True)
        ctx.send_event(record.emit(RewriteQueryEvent(query=query)))

    @step
    async def postprocess(self, ctx: Context[RunState], ev: CandidatesEvent) -> RetrievedEvent:
        """Run the postprocessing stages on the candidates, in order (none: pass them on)."""
        async with recording(ctx, "postprocess", ev) as record:
            chunks = await self.retrieval.postprocess(ev.query, ev.chunks)
            return record.emit(RetrievedEvent(query=ev.query, chunks=chunks))

    @step
    async def grade(
        self, ctx: Context[RunState], ev: RetrievedEvent
    ) -> RefineInternalEvent | WebSearchNeededEvent | RewriteQueryEvent:
        """Score every chunk and decide Correct, Incorrect or Ambiguous."""
        async with recording(ctx, "grade", ev) as record:
            grading = asyncio.ensure_future(self.retrieval.grade(ev.query, ev.chunks, whole=True))
            # Strips are scored while the grader works, so refining after the verdict only
            # selects; wasted on Incorrect runs, as the speculative rewrite is on Correct ones.
            # Scheduled behind the grader's first steps, so that its requests are sent first:
            # the scoring holds the GIL in a worker thread, which the loop would wait for.
            if self.speculative_refine and isinstance(self.refiner, PreparesStrips):
                preparing = self.refiner.prepare(ev.query, ev.chunks)
                asyncio.get_running_loop().call_soon(in_background, preparing)
            graded = await grading
            verdict = graded.verdict
            await ctx.store.set("grades", graded.grades)
            await ctx.store.set("coverage", graded.coverage)
            await ctx.store.set("verdict", verdict)
            record.details["titles"] = {  # for the run's explanation: which chunk each grade is
                c.node.node_id: title for c in ev.chunks if (title := context_of(c.node.metadata))
            }
            if graded.fallback_note:  # after the batch grader's own note, if it fell back: both happened
                record.degrade(graded.fallback_note)
            if verdict is Verdict.CORRECT:
                return record.emit(RefineInternalEvent(query=ev.query, chunks=graded.kept))
            if verdict is Verdict.AMBIGUOUS:
                ctx.send_event(record.emit(RefineInternalEvent(query=ev.query, chunks=graded.kept)))
            if not await ctx.store.get("rewrite_started"):
                ctx.send_event(record.emit(RewriteQueryEvent(query=ev.query)))
            # Incorrect runs answer from these if the web search fails.
            fallback = list(ev.chunks) if verdict is Verdict.INCORRECT else []
            return record.emit(WebSearchNeededEvent(query=ev.query, fallback=fallback))

    @step
    async def refine_internal(self, ctx: Context[RunState], ev: RefineInternalEvent) -> InternalKnowledgeEvent:
        """Keep the relevant strips of the kept internal chunks."""
        async with recording(ctx, "refine_internal", ev) as record:
            strips = await self.refiner.refine(ev.query, ev.chunks)
            return record.emit(InternalKnowledgeEvent(strips=strips))

    @step
    async def rewrite(self, ctx: Context[RunState], ev: RewriteQueryEvent) -> RewrittenQueryEvent:
        """Turn the question into a web search query."""
        async with recording(ctx, "rewrite", ev) as record:
            search_query = await or_fallback(
                record, "rewriter", "used keywords",
                lambda: self.rewriter.rewrite(ev.query), lambda: self.fallback_rewriter.rewrite(ev.query),
            )
            await ctx.store.set("rewritten_query", search_query)
            return record.emit(RewrittenQueryEvent(query=ev.query, search_query=search_query))

    @step
    async def web_search(
        self, ctx: Context[RunState], rewritten: RewrittenQueryEvent, needed: WebSearchNeededEvent
    ) -> WebResultsEvent:
        """Search outside the user's documents, once the verdict asks for it.

        Two event parameters: the engine runs the step once, when both have arrived.
        """
        async with recording(ctx, "web_search", needed) as record:
            if not web_configured(self.searcher):  # a visible state, not a search
                grades, verdict = await ctx.store.get("grades"), await ctx.store.get("verdict")
                record.degraded = no_web_note(verdict, sum(g.score >= self.lower for g in grades))
                return record.emit(WebResultsEvent(query=rewritten.query, results=[]))
            record.search_calls += 1
            try:
                results = await by_deadline(self.searcher.search(rewritten.search_query), "the web search")
            except Exception as exc:  # noqa: BLE001 - a search outage must not lose the run
                # Ambiguous runs already use internal knowledge; Incorrect ones fall back to it.
                results = needed.fallback
                record.degraded = f"web search failed ({describe(exc)}); answered from internal knowledge"
            return record.emit(WebResultsEvent(query=rewritten.query, results=results))

    @step
    async def refine_web(self, ctx: Context[RunState], ev: WebResultsEvent) -> WebKnowledgeEvent:
        """Keep the relevant strips of the web results."""
        async with recording(ctx, "refine_web", ev) as record:
            strips = await self.refiner.refine(ev.query, ev.results)
            return record.emit(WebKnowledgeEvent(strips=strips))

    @step
    async def hop(
        self, ctx: Context[RunState], ev: InternalKnowledgeEvent | WebKnowledgeEvent
    ) -> KnowledgeEvent | None:
        """Wait for the knowledge the verdict promised; follow the question's further hops."""
        state = await ctx.store.get_state()
        ready = ctx.collect_events(ev, _AWAITED[state.verdict])
        if ready is None:
            return None
        strips = [s for knowledge in ready for s in knowledge.strips]
        if not self.hops.active:
            return KnowledgeEvent(strips=strips)
        async with recording(ctx, "hop", ev) as record:
            strips = await self.hops.follow(state.query, state.verdict, strips, record)
            return record.emit(KnowledgeEvent(strips=strips))

    @step
    async def synthesize(self, ctx: Context[RunState], ev: KnowledgeEvent) -> StopEvent:
        """Write the cited answer from every strip the hops kept."""
        state = await ctx.store.get_state()
        strips = ev.strips
        async with recording(ctx, "synthesize", ev) as record:
            # Streamed as written (AnswerDeltaEvent); a failure falls back, and says so.
            answer, sources = await write_answer(
                ctx, record, self.synthesizer, state.query, strips, fallback=self.fallback_synthesizer
            )
            record.output_events.append(StopEvent.__name__)
        settled = await other_steps_finished()
        state = await ctx.store.get_state()
        trace = run_trace(state, state.query, state.verdict.value)
        if not settled:
            trace.notes.append("cost: a speculative step was still calling the model when the answer "
                               "was ready; its call is not counted here")
        rewritten = state.rewritten_query if state.verdict is not Verdict.CORRECT else None
        trace.explanation = explain(
            verdict=state.verdict, grades=state.grades, upper=self.upper, lower=self.lower,
            coverage=state.coverage, cover=self.cover,
            rewritten_query=rewritten, web=web_configured(self.searcher),
            records=trace.steps, kept=strips, answer=answer, sources=sources, degraded=trace.degraded,
        )
        return StopEvent(result=self.result(
            trace, query=state.query, answer=answer, verdict=state.verdict, grades=state.grades,
            sources=sources, rewritten_query=rewritten,
        ))
