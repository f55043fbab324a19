"""Plain RAG, the baseline CRAG is measured against: retrieve, then answer from what was found.

    retrieve ─▶ postprocess ─▶ synthesize

Nothing is graded and nothing is corrected: whatever the retriever returns is trusted,
which is what CRAG's Correct verdict does for every question. `crag eval` compares the
two with the same retriever and the same synthesizer, so the difference it measures is
the grading and the corrective actions alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter
from typing import Any

from llama_index.core.schema import NodeWithScore
from workflows import Context, step
from workflows.events import StopEvent

from crag.events import CandidatesEvent, QueryStartEvent, RetrievedEvent, Strip, Verdict
from crag.interfaces import Postprocessor, Refiner, Retriever, Synthesizer
from crag.steps.graded_retrieval import GradedRetrieval
from crag.trace import Location
from crag.workflows.answering import write_answer
from crag.workflows.base import RecordedState, RecordedWorkflow, check_query, recording, run_trace


class PlainRunState(RecordedState):
    """What one plain run remembers between its steps: when it started, and its records."""


class PlainRAGWorkflow(RecordedWorkflow):
    """Retrieve-then-synthesize, with no grading and no web search.

    An extractive synthesizer picks sentences, not passages, so it needs the retrieved
    chunks cut into scored sentence strips: give a `reader` (a `Refiner`; `crag eval`
    uses the corrective workflow's with no score floor, so the baseline always answers).
    An LLM synthesizer reads whole chunks: leave `reader` out and each chunk is one strip.

    The result is a `CragResult` whose verdict is always Correct (retrieval is trusted)
    and whose grades are empty (nothing was graded); its trace counts LLM calls, and its
    steps report their progress on the event stream, as the corrective workflow's do.

    Args:
        retriever: finds the chunks.
        synthesizer: writes the answer.
        reader: cuts chunks into scored strips for the synthesizer; None passes whole chunks.
        postprocessors: stages run in order on the retrieved chunks, as in the corrective
            workflow; none passes them through. Both are the corrective workflow's
            `GradedRetrieval`, never asked to grade.
        **kwargs: passed to `Workflow` (e.g. `timeout`, 300 s unless given).
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
        super().__init__(**kwargs)
        self.retrieval = GradedRetrieval(retriever, postprocessors=postprocessors)
        self.synthesizer = synthesizer
        self.reader = reader

    @step
    async def retrieve(self, ctx: Context[PlainRunState], ev: QueryStartEvent) -> CandidatesEvent:
        """Find candidate chunks in the user's documents."""
        query = check_query(ev.query)
        await ctx.store.set("started", perf_counter())
        async with recording(ctx, "retrieve", ev) as record:
            chunks = await self.retrieval.retrieve(query)
            return record.emit(CandidatesEvent(query=query, chunks=chunks))

    @step
    async def postprocess(self, ctx: Context[PlainRunState], ev: CandidatesEvent) -> RetrievedEvent:
        """Run the postprocessing stages on the candidates, in order (none: pass them on)."""
        async with recording(ctx, "postprocess", ev) as record:
            chunks = await self.retrieval.postprocess(ev.query, ev.chunks)
            return record.emit(RetrievedEvent(query=ev.query, chunks=chunks))

    @step
    async def synthesize(self, ctx: Context[PlainRunState], ev: RetrievedEvent) -> StopEvent:
        """Answer from every retrieved chunk."""
        async with recording(ctx, "synthesize", ev) as record:
            if self.reader is not None:
                strips = await self.reader.refine(ev.query, ev.chunks)
            else:
                strips = [_whole_chunk(c) for c in ev.chunks]
            answer, sources = await write_answer(ctx, record, self.synthesizer, ev.query, strips)
            record.output_events.append(StopEvent.__name__)
        trace = run_trace(await ctx.store.get_state(), ev.query, verdict=None)
        return StopEvent(result=self.result(
            trace, query=ev.query, answer=answer, verdict=Verdict.CORRECT, grades=[], sources=sources,
        ))


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
        **Location.fields(meta),
    )
