"""Plain RAG, the baseline CRAG is measured against: retrieve, then answer from what was found.

    retrieve ─▶ postprocess ─▶ synthesize

Nothing is graded and nothing is corrected: whatever the retriever returns is trusted,
which is what CRAG's Correct verdict does for every question. `crag eval` compares the
two with the same retriever and the same synthesizer, so the difference it measures is
the grading and the corrective actions alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from time import perf_counter
from typing import Any

from llama_index.core.schema import NodeWithScore
from pydantic import BaseModel, Field
from workflows import Context, Workflow, step
from workflows.events import StopEvent

from crag.errors import QueryError
from crag.events import CandidatesEvent, CragResult, QueryStartEvent, RetrievedEvent, Strip, Verdict
from crag.interfaces import Postprocessor, Refiner, Retriever, Synthesizer
from crag.steps.postprocessing import apply_postprocessors
from crag.trace import RunTrace, StepRecord, attributing_calls_to, install_llm_call_counter
from crag.workflows.corrective import MAX_QUERY_CHARS, run_sync


class PlainRunState(BaseModel):
    """What one plain run remembers between its steps."""

    started: float = 0.0
    records: list[StepRecord] = Field(default_factory=list)


class PlainRAGWorkflow(Workflow):
    """Retrieve-then-synthesize, with no grading and no web search.

    An extractive synthesizer picks sentences, not passages, so it needs the retrieved
    chunks cut into scored sentence strips: give a `reader` (a `Refiner`; `crag eval`
    uses the corrective workflow's with no score floor, so the baseline always answers).
    An LLM synthesizer reads whole chunks: leave `reader` out and each chunk is one strip.

    The result is a `CragResult` whose verdict is always Correct (retrieval is trusted)
    and whose grades are empty (nothing was graded); its trace counts LLM calls as the
    corrective workflow's does.

    Args:
        retriever: finds the chunks.
        synthesizer: writes the answer.
        reader: cuts chunks into scored strips for the synthesizer; None passes whole chunks.
        postprocessors: stages run in order on the retrieved chunks, as in the corrective
            workflow; none passes them through.
        **kwargs: passed to `Workflow` (e.g. `timeout`).
    """

    def __init__(
        self,
        *,
        retriever: Retriever,
        synthesizer: Synthesizer,
        reader: Refiner | None = None,
        postprocessors: Sequence[Postprocessor] = (),
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("timeout", 300.0)
        super().__init__(**kwargs)
        self.retriever = retriever
        self.synthesizer = synthesizer
        self.reader = reader
        self.postprocessors = list(postprocessors)
        install_llm_call_counter()

    @step
    async def retrieve(self, ctx: Context[PlainRunState], ev: QueryStartEvent) -> CandidatesEvent:
        """Find candidate chunks in the user's documents."""
        query = " ".join(ev.query.split())
        if not query:
            raise QueryError("The question is empty; ask something.")
        if len(query) > MAX_QUERY_CHARS:
            raise QueryError(
                f"The question is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}."
            )
        started = perf_counter()
        with _recording("retrieve", ev, started, started) as record:
            chunks = await self.retriever.retrieve(query)
            out = record.emit(CandidatesEvent(query=query, chunks=chunks))
        async with ctx.store.edit_state() as state:
            state.started = started
            state.records.append(record)
        return out

    @step
    async def postprocess(self, ctx: Context[PlainRunState], ev: CandidatesEvent) -> RetrievedEvent:
        """Run the postprocessing stages on the candidates, in order (none: pass them on)."""
        state = await ctx.store.get_state()
        with _recording("postprocess", ev, state.started, perf_counter()) as record:
            chunks = await apply_postprocessors(self.postprocessors, ev.query, ev.chunks)
            out = record.emit(RetrievedEvent(query=ev.query, chunks=chunks))
        async with ctx.store.edit_state() as state:
            state.records.append(record)
        return out

    @step
    async def synthesize(self, ctx: Context[PlainRunState], ev: RetrievedEvent) -> StopEvent:
        """Answer from every retrieved chunk."""
        state = await ctx.store.get_state()
        with _recording("synthesize", ev, state.started, perf_counter()) as record:
            if self.reader is not None:
                strips = await self.reader.refine(ev.query, ev.chunks)
            else:
                strips = [_whole_chunk(c) for c in ev.chunks]
            answer, sources = await self.synthesizer.synthesize(ev.query, strips)
            record.output_events.append(StopEvent.__name__)
        steps = [*state.records, record]
        trace = RunTrace(
            query=ev.query, verdict=None, seconds=perf_counter() - state.started, steps=steps
        )
        return StopEvent(
            result=CragResult(
                query=ev.query,
                answer=answer,
                verdict=Verdict.CORRECT,
                grades=[],
                sources=sources,
                timings={r.name: round(r.seconds, 6) for r in steps},
                steps=trace.step_names(),
                trace=trace,
            )
        )

    def ask(self, query: str) -> CragResult:
        """Run synchronously; works inside a running event loop too."""
        return run_sync(lambda: self.run(query=query))


@contextmanager
def _recording(name: str, ev: Any, run_started: float, started: float) -> Iterator[StepRecord]:
    """A trace record of one step, with the LLM calls made inside the block counted on it."""
    record = StepRecord(name=name, input_event=type(ev).__name__, started=started - run_started)
    try:
        with attributing_calls_to(record):
            yield record
    finally:
        record.ended = perf_counter() - run_started


def _whole_chunk(chunk: NodeWithScore) -> Strip:
    meta = chunk.node.metadata
    return Strip(
        text=chunk.node.get_content(),
        source_id=chunk.node.node_id,
        kind="web" if meta.get("kind") == "web" else "internal",
        score=float(chunk.score or 0.0),
        doc_id=meta.get("doc_id") or chunk.node.ref_doc_id,
        title=meta.get("title"),
        url=meta.get("url"),
    )
