"""The Corrective-RAG workflow (Yan et al., 2024) as typed events between async steps.

    retrieve ─▶ postprocess ─▶ grade ─┬─ Correct ───▶ refine_internal ─────────────────┐
                                      ├─ Ambiguous ─▶ both branches, concurrently ──────┼─▶ synthesize
                                      └─ Incorrect ─▶ rewrite ─▶ web_search ─▶ refine_web ┘

Between the knowledge and `synthesize`, `hop` follows a compound question's further hops: a
comparison's part the knowledge misses, a model's next question for a bridge (`Decomposer`), or
offline the bridge that the first pass's best strips name when they answer the question only in
part (`BridgeFinder`). Each is retrieved and graded, and searched on the web when the documents
miss it.

`postprocess` runs the configured stages (cutoffs, keyword filters, sentence windows,
reranking, reordering) on what was retrieved; with none, it passes the chunks through.

The rewrite is speculative by default: it starts with grading rather than after it, so
an Incorrect verdict costs two model round trips in sequence (grade ∥ rewrite, then
synthesize) instead of three. The web search itself waits for the verdict, so a Correct
run never searches. Each step calls one component.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from time import perf_counter
from typing import Any, ClassVar

from llama_index.core.schema import NodeWithScore
from pydantic import Field
from workflows import Context, step
from workflows.events import StopEvent

from crag._offload import off_loop
from crag.budget import by_deadline, current_budget
from crag.config import GraderSettings
from crag.errors import ConfigError
from crag.events import (
    Bridge,
    CandidatesEvent,
    CragResult,
    Grade,
    InternalKnowledgeEvent,
    KnowledgeEvent,
    QueryStartEvent,
    RefineInternalEvent,
    RetrievedEvent,
    RewriteQueryEvent,
    RewrittenQueryEvent,
    Strip,
    Turn,
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
from crag.steps.bridging import answers
from crag.steps.condensing import RuleCondenser
from crag.steps.decomposition import RuleDecomposer, names_a_subject
from crag.steps.grading import context_of, decide_verdict, thresholds_of
from crag.steps.postprocessing import apply_postprocessors
from crag.steps.rewriting import KeywordRewriter
from crag.steps.synthesis import ExtractiveSynthesizer
from crag.trace import substep
from crag.workflows.answering import write_answer
from crag.workflows.base import (
    MAX_QUERY_CHARS,
    RecordedState,
    RecordedWorkflow,
    check_query,
    describe,
    or_fallback,
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


BRIDGE_SEARCHES = 1
"""Web searches a run's bridge hops may make together. Each is a paid call with Tavily; with
two bridges each searching, a single-hop question that merely names a word its passage lacks
("occupation") tripled a run's searches (PopQA dev, 0.5 to 1.5 a question)."""


class _SearchesInOrder:
    """A run's bridge searches, handed to the hops in the bridges' order (the best strip's
    first) whichever hop's grading ends first: the hops run at once, and when the first to be
    graded took the search, the same question got another answer from run to run (18 of 300
    PopQA dev answers differed between two runs). Each hop must `decide` once, or `skip` when
    it fails first, or the hops after it would wait for it."""

    def __init__(self, searches: int, hops: int) -> None:
        self.left = searches
        self._decided = [asyncio.Event() for _ in range(hops)]

    async def decide(self, hop: int, wanted: bool) -> bool:
        """Whether hop `hop` (0-based) searches: when it wants to and a search is left once the
        hops before it have decided."""
        if hop:
            await self._decided[hop - 1].wait()
        granted = wanted and self.left > 0
        self.left -= granted
        self._decided[hop].set()
        return granted

    def skip(self, hop: int) -> None:
        """Hop `hop` will not decide (it failed): the hops after it need not wait."""
        self._decided[hop].set()


class CorrectiveRAGWorkflow(RecordedWorkflow):
    """Corrective RAG: grade what was retrieved, and correct course with a web search.

    Args:
        retriever, grader, refiner, rewriter, web_search, synthesizer: the components,
            anything satisfying the Protocols in `crag.interfaces`.
        postprocessors: stages run in order on the retrieved chunks before grading
            (`crag.steps.postprocessing`); none passes them through.
        upper: some chunk scoring at least this makes the verdict Correct.
        lower: every chunk scoring below this makes it Incorrect; in between, Ambiguous.
            Either left unset is the grader's own (`grading.thresholds_of`).
        decomposer: finds a compound question's further hops (`crag.steps.decomposition`):
            a comparison's parts, and a model's next question for a bridge.
        bridger: finds the second hop of a question the first pass answered only in part,
            when the decomposer gives no next question (`crag.steps.bridging`, offline;
            `build_workflow` sets it with the rule decomposer, not the model's). With neither,
            a run answers from the first pass only.
        judge: scores how much of the question the kept chunks cover together
            (`LexicalEvaluator` is one); None skips the set judgment.
        cover: the share of the question the kept chunks must cover together for Correct.
        speculative_rewrite: start the query rewrite alongside grading (default) rather
            than after an Incorrect or Ambiguous verdict; wasted only on Correct runs.
        speculative_refine: let a refiner with `prepare` (the strip refiner) score the
            retrieved chunks' strips while they are graded (default), so refining after the
            verdict is a selection; wasted only on Incorrect runs.
        condenser: makes a follow-up (a run started with `history`) standalone before
            retrieval; default: the offline rules (`RuleCondenser`), which also stand in
            when it fails.
        fallback_rewriter, fallback_synthesizer, fallback_decomposer: stand in when the
            rewriter, synthesizer or decomposer fails (an LLM that is down), so the run still
            answers; the result's `degraded` list says so. Default: the offline keyword
            rewriter, extractive synthesizer and rule decomposer.
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
        given = (upper, lower)
        upper, lower = thresholds_of(grader, upper, lower)  # unset: the grader's own
        if lower > upper:
            whose = " (the grader's own)" if None in given else ""
            raise ConfigError(f"lower threshold ({lower}) must not exceed upper ({upper}){whose}")
        self.retriever = retriever
        self.grader = grader
        self.refiner = refiner
        self.rewriter = rewriter
        self.searcher = web_search  # not `web_search`: that name is the step
        self.synthesizer = synthesizer
        self.postprocessors = list(postprocessors)
        self.upper = upper
        self.lower = lower
        self.decomposer = decomposer
        self.judge = judge
        self.cover = cover
        self.speculative_rewrite = speculative_rewrite
        self.speculative_refine = speculative_refine
        self.fallback_rewriter = fallback_rewriter or KeywordRewriter()
        self.fallback_synthesizer = fallback_synthesizer or ExtractiveSynthesizer()
        self.fallback_decomposer = fallback_decomposer or RuleDecomposer()
        self.fallback_condenser = RuleCondenser()
        self.condenser = condenser or self.fallback_condenser
        self.bridger = bridger

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
                standalone = await self._standalone(query, ev.history, record)
                if standalone != query:
                    await ctx.store.set("asked", query)
                    await ctx.store.set("query", standalone)
                    query = standalone
            budget = current_budget()
            calls_left = budget.calls_left() if budget is not None else None
            if self.speculative_rewrite and calls_left is None:
                await self._rewrite_now(ctx, record, query)
            chunks = await self.retriever.retrieve(query)
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
            chunks = await apply_postprocessors(self.postprocessors, ev.query, ev.chunks)
            return record.emit(RetrievedEvent(query=ev.query, chunks=chunks))

    @step
    async def grade(
        self, ctx: Context[RunState], ev: RetrievedEvent
    ) -> RefineInternalEvent | WebSearchNeededEvent | RewriteQueryEvent:
        """Score every chunk and decide Correct, Incorrect or Ambiguous."""
        async with recording(ctx, "grade", ev) as record:
            grading = asyncio.ensure_future(self.grader.grade(ev.query, ev.chunks))
            # Strips are scored while the grader works, so refining after the verdict only
            # selects; wasted on Incorrect runs, as the speculative rewrite is on Correct ones.
            # Scheduled behind the grader's first steps, so that its requests are sent first:
            # the scoring holds the GIL in a worker thread, which the loop would wait for.
            if self.speculative_refine and isinstance(self.refiner, PreparesStrips):
                preparing = self.refiner.prepare(ev.query, ev.chunks)
                asyncio.get_running_loop().call_soon(_in_background, preparing)
            grades = await grading
            kept = [c for c, g in zip(ev.chunks, grades) if g.score >= self.lower]
            # The set judgment can only hold back a Correct: below `upper` it would decide nothing.
            reaches_upper = any(g.score >= self.upper for g in grades)
            coverage = await self._coverage(ev.query, kept) if self.judge is not None and reaches_upper else None
            verdict = decide_verdict(grades, self.upper, self.lower, coverage=coverage, cover=self.cover)
            await ctx.store.set("grades", list(grades))
            await ctx.store.set("coverage", coverage)
            await ctx.store.set("verdict", verdict)
            record.details["titles"] = {  # for the run's explanation: which chunk each grade is
                c.node.node_id: title for c in ev.chunks if (title := context_of(c.node.metadata))
            }
            fallbacks = [g for g in grades if g.note]
            if fallbacks:
                # After the batch grader's own note, if it fell back: both are what happened.
                record.degrade(f"{len(fallbacks)} of {len(grades)} grades by a fallback ({fallbacks[0].note})")
            if verdict is Verdict.CORRECT:
                return record.emit(RefineInternalEvent(query=ev.query, chunks=kept))
            if verdict is Verdict.AMBIGUOUS:
                ctx.send_event(record.emit(RefineInternalEvent(query=ev.query, chunks=kept)))
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
        if self.decomposer is None and self.bridger is None:
            return KnowledgeEvent(strips=strips)
        async with recording(ctx, "hop", ev) as record:
            parts, follow_ups = await self._further_hops(state, strips, record) if self.decomposer else ([], [])
            questions = list(enumerate(follow_ups, 1))
            if parts:  # a comparison: each part's best strip gets a place in the answer
                tests = [names_a_subject(p, besides=parts) for p in parts]
                # A part that no strip is about needs its own hop.
                questions = [(n, p) for n, (p, about) in enumerate(zip(parts, tests), 1)
                             if not any(about(s.title) for s in strips)]
                strips = [s.model_copy(update={"hop": next((n for n, about in enumerate(tests, 1) if about(s.title)), 0)})
                          for s in strips]
            elif not follow_ups and self.bridger is not None:
                bridges = await self.bridger.bridges(state.query, strips)
                searches = _SearchesInOrder(BRIDGE_SEARCHES, len(bridges))  # a run's further web searches are few
                hops = await asyncio.gather(*(self._bridge_hop(b, record, searches, n) for n, b in enumerate(bridges)))
                # In the order the bridges were found: the best strip's first. A bridge's document
                # may be one the first pass had: its strips are scored again, for what is asked of it.
                record.details.setdefault("hops", []).extend(line for _, line in hops)
                new = [s.model_copy(update={"hop": n}) for n, (found, _) in enumerate(hops, 1) for s in found]
                return record.emit(KnowledgeEvent(strips=strips + new))
            found = await asyncio.gather(*(self._one_hop(q, n, record) for n, q in questions))
            # A hop adds what the first pass did not have: strips of documents it had add nothing.
            had = {s.doc_id or s.source_id for s in strips}
            new = [s for hop in found for s in hop if (s.doc_id or s.source_id) not in had]
            return record.emit(KnowledgeEvent(strips=strips + new))

    async def _further_hops(
        self, state: RunState, strips: list[Strip], record: Any
    ) -> tuple[list[str], list[str]]:
        """A comparison's parts, or else a bridge's next questions; both [] for a simple question.

        A question describing a thing (a bridge) takes the next hop unless the first pass was
        judged Correct.
        """
        assert self.decomposer is not None
        decomposer = self.decomposer
        return await or_fallback(
            record, "decomposer", "used the rules",
            lambda: self._plan(decomposer, state, strips), lambda: self._plan(self.fallback_decomposer, state, strips),
        )

    async def _plan(
        self, decomposer: Decomposer, state: RunState, strips: list[Strip]
    ) -> tuple[list[str], list[str]]:
        parts = await decomposer.split(state.query)
        if parts or state.verdict is Verdict.CORRECT:
            return parts, []
        return [], await decomposer.follow_up(state.query, strips)

    async def _one_hop(self, question: str, number: int, record: Any) -> list[Strip]:
        """One sub-question retrieved and graded as the question was; searched on the web
        when no chunk reaches the upper threshold. Its strips are marked with its number."""
        about = names_a_subject(question)
        with substep(record, f"hop {number}: retrieve"):
            chunks = await self.retriever.retrieve(question)
            chunks = await apply_postprocessors(self.postprocessors, question, chunks)
            chunks = [c for c in chunks if about(context_of(c.node.metadata))]
        with substep(record, f"hop {number}: grade"):
            grades = await self.grader.grade(question, chunks)
            verdict = decide_verdict(grades, self.upper, self.lower)
        kept = [c for c, g in zip(chunks, grades) if g.score >= self.lower]
        with substep(record, f"hop {number}: refine"):
            strips = await self.refiner.refine(question, kept) if verdict is not Verdict.INCORRECT else []
        searched = verdict is not Verdict.CORRECT and web_configured(self.searcher)
        if searched:
            with substep(record, f"hop {number}: web_search") as search:
                search.search_calls += 1
                try:
                    results = await by_deadline(self.searcher.search(question), "the web search")
                    strips += await self.refiner.refine(question, [r for r in results if about(context_of(r.node.metadata))])
                except Exception as exc:  # noqa: BLE001 - a search outage costs this hop only
                    search.degraded = record.degraded = f"web search for a hop failed ({describe(exc)})"
        record.details.setdefault("hops", []).append(
            {"question": question, "verdict": verdict.value, "searched": searched, "strips": len(strips),
             "found": list(dict.fromkeys(s.title or s.source_id for s in strips))}
        )
        return [s.model_copy(update={"hop": number}) for s in strips]

    async def _bridge_hop(
        self, bridge: Bridge, record: Any, searches: _SearchesInOrder, number: int
    ) -> tuple[list[Strip], dict[str, Any]]:
        """The second hop of a bridge (the `number`th, from 0): retrieved with the bridge and what
        is asked of it, graded against the question and the bridge, searched on the web when no
        chunk reaches the upper threshold and the run's hops have a search left (`searches`,
        shared; the web's results graded the same way). Returns its strips and what it did, for
        the trace."""
        name = f"hop to “{bridge.entity}”"
        try:
            with substep(record, f"{name}: retrieve"):
                chunks = await self.retriever.retrieve(bridge.query)
                chunks = await apply_postprocessors(self.postprocessors, bridge.query, chunks)
            with substep(record, f"{name}: grade"):
                grades = await self.grader.grade(bridge.graded_against, chunks)
        except BaseException:
            searches.skip(number)
            raise
        verdict = decide_verdict(grades, self.upper, self.lower)
        searched = await searches.decide(number, verdict is not Verdict.CORRECT and web_configured(self.searcher))
        if searched:
            with substep(record, f"{name}: web_search") as search:
                search.search_calls += 1
                try:
                    results = await by_deadline(self.searcher.search(bridge.query), "the web search")
                    chunks = [*chunks, *results]
                    grades = [*grades, *await self.grader.grade(bridge.graded_against, results)]
                except Exception as exc:  # noqa: BLE001 - a search outage costs this hop only
                    search.degraded = record.degraded = f"web search for a hop failed ({describe(exc)})"
        kept = [c for c, g in zip(chunks, grades) if g.score >= self.lower]
        with substep(record, f"{name}: refine"):
            refined = await self.refiner.refine(bridge.query, kept)
            leads = await off_loop(lambda: [answers(bridge, s) for s in refined])
            strips = [s.model_copy(update={"leads": lead}) for s, lead in zip(refined, leads)]
        line = {
            "question": bridge.query, "bridge": bridge.entity, "found_in": bridge.found_in,
            "graded_against": bridge.graded_against, "verdict": verdict.value, "searched": searched,
            "strips": len(strips), "found": list(dict.fromkeys(s.title or s.source_id for s in strips)),
            "answering": sum(s.leads for s in strips),
        }
        return strips, line

    async def _standalone(self, query: str, history: Sequence[Turn], record: Any) -> str:
        """The follow-up made standalone by the condenser, or by the rules if it fails."""
        return check_query(await or_fallback(
            record, "condenser", "used the rules",
            lambda: self.condenser.condense(query, history),
            lambda: self.fallback_condenser.condense(query, history),
        ))

    async def _coverage(self, query: str, chunks: Sequence[NodeWithScore]) -> float:
        """How much of `query` the chunks cover together, by the `judge`."""
        assert self.judge is not None
        pairs = [(c.node.get_content(), context_of(c.node.metadata)) for c in chunks]
        return await off_loop(self.judge.coverage, query, pairs)

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
        return StopEvent(
            result=CragResult(
                query=state.query,
                answer=answer,
                verdict=state.verdict,
                grades=state.grades,
                sources=sources,
                rewritten_query=rewritten,
                timings={r.name: round(r.seconds, 6) for r in trace.steps},
                steps=trace.step_names(),
                trace=trace,
                degraded=trace.degraded,
                cost=self.run_cost(trace),
            )
        )


_background: set[asyncio.Task] = set()


def _in_background(work: Coroutine[Any, Any, Any]) -> None:
    """Run `work` without waiting for it: kept referenced until done; a failure is dropped,
    since whatever needed the work does it again (a speculative step)."""
    task = asyncio.ensure_future(work)
    _background.add(task)
    task.add_done_callback(lambda done: (_background.discard(done), done.cancelled() or done.exception()))
