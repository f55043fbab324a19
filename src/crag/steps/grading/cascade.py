"""The CRAG paper's economy: the offline evaluator grades, the model only where it is unsure."""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.schema import NodeWithScore

from crag._offload import warm_up
from crag.events import Grade
from crag.interfaces import Grader
from crag.steps.grading.verdict import thresholds_of


class CascadeGrader:
    """The offline evaluator scores every chunk; only those scoring inside `band` (low, high)
    go to `model`: below it a chunk is surely irrelevant, at or above it surely relevant."""

    name = "cascade"

    def __init__(self, offline: Grader, model: Grader, *, band: tuple[float, float]) -> None:
        low, high = band
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"cascade band must satisfy 0 <= low <= high <= 1, not {band}")
        self.offline = offline
        self.model = model
        self.band = (low, high)
        # The verdict reads the model's scale: the band sends it every grade near a threshold.
        self.thresholds = thresholds_of(model)

    def warm_up(self) -> None:
        warm_up(self.offline, self.model)

    def uncertain(self, score: float) -> bool:
        low, high = self.band
        return low <= score and (score < high or high >= 1.0)  # a band reaching 1.0 includes it

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        first = await self.offline.grade(query, chunks)
        unsure = [i for i, g in enumerate(first) if self.uncertain(g.score)]
        if not unsure:
            return first
        second = await self.model.grade(query, [chunks[i] for i in unsure])
        grades = list(first)
        for i, grade in zip(unsure, second):
            grades[i] = grade
        return grades
