"""A cross-encoder reranker grades: one request scores all of a question's chunks, and its
0-1 score is read with thresholds fitted for it (`crag calibrate`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from llama_index.core.schema import NodeWithScore

from crag._offload import warm_up
from crag.budget import by_deadline
from crag.errors import RerankError
from crag.events import Grade
from crag.interfaces import Grader, Reranker
from crag.steps.grading.llm import unusable

# A cross-encoder's sigmoid is a probability of relevance, sharply two-sided: a passage that
# answers scores above 0.5 (often 0.9+), an unrelated one below 0.1 (often 0.001). Until
# `crag calibrate` fits a reranker's own, 0.5 is Correct (more likely relevant than not) and
# below 0.1 on every chunk Incorrect; in between, Ambiguous searches the web as well.
RERANK_THRESHOLDS = (0.5, 0.1)


class RerankGrader:
    """Grades every chunk of a question with one `reranker.rerank` call, grades in chunk order.

    When the reranker cannot score them (down, slow, unusable scores: `RerankError`, or the
    run's deadline), `fallback` grades them all and each grade's `note` says why: the run's
    `degraded` list then says so, as for a model grader's fallback.

    Args:
        reranker: scores (query, document) pairs in [0, 1].
        fallback: grades when the reranker cannot (the offline evaluator).
        thresholds: (upper, lower) its scores are read with (`verdict.thresholds_of`).
        max_chars: characters of each chunk sent (a cross-encoder reads ~512 tokens anyway).
    """

    name = "rerank"
    thresholds = RERANK_THRESHOLDS  # the class's, for `thresholds_of(RerankGrader, upper, lower)`

    def __init__(
        self, reranker: Reranker, fallback: Grader, *,
        thresholds: tuple[float, float] = RERANK_THRESHOLDS, max_chars: int = 2000,
    ) -> None:
        upper, lower = thresholds
        if not 0.0 <= lower <= upper <= 1.0:
            raise ValueError(f"rerank thresholds must satisfy 0 <= lower <= upper <= 1, not {thresholds}")
        self.reranker = reranker
        self.fallback = fallback
        self.thresholds = (upper, lower)
        self.max_chars = max_chars

    def warm_up(self) -> None:
        """Load the reranker (a local model) and the fallback's models."""
        warm_up(self.reranker, self.fallback)

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        if not chunks:
            return []
        texts = [c.node.get_content()[: self.max_chars] for c in chunks]
        try:
            # Bounded here as well as in the client: a reranker of the user's own ends by the deadline too.
            scores = usable(await by_deadline(self.reranker.rerank(query, texts), "the reranker"), len(texts))
        except Exception as exc:  # noqa: BLE001 - any reranker failure degrades to the fallback
            grades = await self.fallback.grade(query, chunks)
            return [g.model_copy(update={"note": f"reranker unusable ({unusable(exc)}); used {g.grader}"})
                    for g in grades]
        return [Grade(chunk_id=c.node.node_id, score=s, grader=self.name) for c, s in zip(chunks, scores)]


def usable(scores: Sequence[float], count: int) -> list[float]:
    """`scores` when there is one finite score in [0, 1] per document; `RerankError` otherwise
    (a reranker of the user's own may break the protocol's promise)."""
    scores = list(scores)
    if len(scores) != count:
        raise RerankError(f"the reranker gave {len(scores)} scores for {count} documents")
    bad = [s for s in scores if not (isinstance(s, (int, float)) and math.isfinite(s) and 0.0 <= s <= 1.0)]
    if bad:
        raise RerankError(f"the reranker gave scores outside [0, 1]: {bad[:3]}")
    return [float(s) for s in scores]


def reranker_order(grades: Sequence[Grade]) -> list[int]:
    """The grades' indexes with those the reranker gave (not its fallback) in its order, best
    first, in the places they held; the others (a cascade's clear cases) where they were.

    The refined knowledge keeps its chunks' order, and the answer numbers its sources by it:
    so both follow the reranker's judgment, not the retriever's."""
    ranked = [i for i, g in enumerate(grades) if g.grader == RerankGrader.name and g.note is None]
    order = list(range(len(grades)))
    for place, i in zip(ranked, sorted(ranked, key=lambda i: -grades[i].score)):  # stable: ties keep their order
        order[place] = i
    return order
