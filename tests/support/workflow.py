"""The corrective workflow's steps and events as the tests name them, and fake components that
hold a run where a test wants it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from llama_index.core.schema import NodeWithScore
from workflows.utils import get_steps_from_class

import crag
from crag.events import Grade

# Every step of the corrective workflow, as the engine itself finds them on the class.
ALL_STEPS = sorted(get_steps_from_class(crag.CorrectiveRAGWorkflow))
# Every event the corrective workflow's graph draws.
EVENTS = [
    "QueryStartEvent", "CandidatesEvent", "RetrievedEvent", "RefineInternalEvent", "RewriteQueryEvent",
    "WebResultsEvent", "InternalKnowledgeEvent", "WebKnowledgeEvent", "StopEvent",
]


class GatedGrader:
    """Holds every run in its grading step until the test opens the gate; counts the peak."""

    name = "gated"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.inside = 0
        self.peak = 0

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        self.inside += 1
        self.peak = max(self.peak, self.inside)
        try:
            while not self.gate.is_set():
                await asyncio.sleep(0.01)
        finally:
            self.inside -= 1
        return [Grade(chunk_id=c.node.node_id, score=0.9, grader=self.name) for c in chunks]


class NeverAnswers:
    """A synthesizer that waits forever, as a component stuck on a dead connection would."""

    async def synthesize(self, query: str, strips: list) -> tuple[str, list]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")
