"""Knowledge refinement (CRAG's decompose-then-recompose): keep the strips that matter."""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.schema import NodeWithScore

from crag._offload import off_loop, warm_up
from crag.events import Strip
from crag.steps.grading import LexicalEvaluator, context_of
from crag.text import sentences
from crag.trace import note_dropped


class StripRefiner:
    """Splits each chunk into sentence strips, scores them, keeps the best in source order.

    Args:
        evaluator: scores a strip against the query.
        max_strips: strips kept in all; None keeps every strip that passes `min_score`.
        min_score: strips scoring below this are dropped.
    """

    def __init__(
        self, evaluator: LexicalEvaluator, *, max_strips: int | None = 6, min_score: float = 0.4
    ) -> None:
        self.evaluator = evaluator
        self.max_strips = max_strips
        self.min_score = min_score

    def warm_up(self) -> None:
        """Load the sentence splitter and the evaluator's analyzer."""
        warm_up(self.evaluator)

    async def refine(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Strip]:
        # Splitting and scoring every sentence is the heaviest CPU work of an offline run.
        kept, dropped = await off_loop(self._refine, query, chunks)
        note_dropped(dropped)  # for the run's explanation: what refinement left out
        return kept

    def _refine(self, query: str, chunks: Sequence[NodeWithScore]) -> tuple[list[Strip], list[Strip]]:
        """The kept strips in source order, and the dropped ones, best first."""
        strips: list[Strip] = []
        for chunk in chunks:
            meta = chunk.node.metadata
            kind = "web" if meta.get("kind") == "web" else "internal"
            for sentence in sentences(chunk.node.get_content()):
                strips.append(
                    Strip(
                        text=sentence,
                        source_id=chunk.node.node_id,
                        kind=kind,
                        score=self.evaluator.score(query, sentence, context_of(meta), split=False),
                        doc_id=meta.get("doc_id") or chunk.node.ref_doc_id,
                        title=meta.get("title"),
                        url=meta.get("url"),
                    )
                )
        ranked = sorted(range(len(strips)), key=lambda i: -strips[i].score)
        kept = sorted(i for i in ranked[: self.max_strips] if strips[i].score >= self.min_score)
        chosen = set(kept)
        return [strips[i] for i in kept], [strips[i] for i in ranked if i not in chosen]
