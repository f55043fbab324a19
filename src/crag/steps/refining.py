"""Knowledge refinement (CRAG's decompose-then-recompose): keep the strips that matter."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future

from llama_index.core.schema import NodeWithScore

from crag._offload import off_loop, warm_up
from crag.events import Strip
from crag.steps.grading import LexicalEvaluator, context_of
from crag.steps.table_rows import labelled_rows
from crag.text import SPANS_KEY, sentences, terms, words
from crag.trace import Location, note_dropped


class StripRefiner:
    """Splits each chunk into sentence strips, scores them, keeps the best in source order.

    `prepare` scores a chunk's strips ahead of `refine` (the workflow calls it while the
    grader works, so refining after the verdict only selects); a chunk's strips for a query
    are scored once, whichever comes first, and kept for the last `CACHED` (query, chunk) pairs.

    Args:
        evaluator: scores a strip against the query.
        max_strips: strips kept in all; None keeps every strip that passes `min_score`.
        min_score: strips scoring below this are dropped.
    """

    CACHED = 2048

    def __init__(
        self, evaluator: LexicalEvaluator, *, max_strips: int | None = 6, min_score: float = 0.4
    ) -> None:
        self.evaluator = evaluator
        self.max_strips = max_strips
        self.min_score = min_score
        self._scored: OrderedDict[tuple[str, str], Future[list[Strip]]] = OrderedDict()
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        """Load the sentence splitter and the evaluator's analyzer."""
        warm_up(self.evaluator)

    async def prepare(self, query: str, chunks: Sequence[NodeWithScore]) -> None:
        """Score the chunks' strips now, so that `refine` on any of them only selects."""
        await off_loop(lambda: [self._strips_of(query, chunk) for chunk in chunks])

    async def refine(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Strip]:
        # Splitting and scoring every sentence is the heaviest CPU work of an offline run.
        kept, dropped = await off_loop(self._refine, query, chunks)
        note_dropped(dropped)  # for the run's explanation: what refinement left out
        return kept

    def _refine(self, query: str, chunks: Sequence[NodeWithScore]) -> tuple[list[Strip], list[Strip]]:
        """The kept strips in source order, and the dropped ones, best first."""
        strips = [strip for chunk in chunks for strip in self._strips_of(query, chunk)]
        ranked = sorted(range(len(strips)), key=lambda i: ranking(strips[i]))
        kept = sorted(i for i in ranked[: self.max_strips] if strips[i].score >= self.min_score)
        chosen = set(kept)
        return [strips[i] for i in kept], [strips[i] for i in ranked if i not in chosen]

    def _strips_of(self, query: str, chunk: NodeWithScore) -> list[Strip]:
        """The chunk's strips scored for `query`: computed by the first caller, awaited by others."""
        key = (query, chunk.node.node_id)
        with self._lock:
            scored = self._scored.get(key)
            mine = scored is None
            if mine:
                scored = self._scored[key] = Future()
                if len(self._scored) > self.CACHED:
                    self._scored.popitem(last=False)
        if mine:
            try:
                scored.set_result(self._score(query, chunk))
            except BaseException as exc:  # noqa: BLE001 - handed to every caller waiting on it
                with self._lock:
                    self._scored.pop(key, None)
                scored.set_exception(exc)
        return scored.result()

    def _score(self, query: str, chunk: NodeWithScore) -> list[Strip]:
        meta = chunk.node.metadata
        kind = "web" if meta.get("kind") == "web" else "internal"
        context = context_of(meta)
        place = Location.fields(meta)  # the chunk's file and page, the same for every sentence
        asked = set(terms(query))
        return [
            Strip(
                text=sentence,
                source_id=chunk.node.node_id,
                kind=kind,
                score=self.evaluator.score(query, sentence, context, split=False),
                defines=defines(sentence, asked),
                doc_id=meta.get("doc_id") or chunk.node.ref_doc_id,
                title=meta.get("title"),
                url=meta.get("url"),
                **place,
            )
            # A table's rows each with its header: "Food: Berries; Calories per portion: 150".
            for sentence in labelled_rows(sentences(chunk.node.get_content(), meta.get(SPANS_KEY)),
                                          asked=asked, comma_separated=_comma_separated(meta))
        ]


def _comma_separated(meta: dict) -> bool:
    """Whether a chunk is a CSV's (or TSV's) rows, each line a record."""
    return str(meta.get("file_name", "")).lower().endswith((".csv", ".tsv"))


def ranking(strip: Strip) -> tuple[float, bool]:
    """Best first, as a sorting key: the higher score, and at an equal score the sentence that
    defines a term of the question ("Cynic: A blackguard whose..." before "they brought the
    word 'cynic' into disfavor"); other ties keep their order, the source's own."""
    return -strip.score, not strip.defines


# A sentence's first words, then a colon: "Cynic: A blackguard whose...", a glossary's entry as
# read from a definition list (`formats.html`), a slide or a document.
_DEFINITION = re.compile(r"^\W*((?:[^\W_]+['’]?\s+){0,4}[^\W_]+)\s*:\s")


def defines(sentence: str, asked: set[str]) -> bool:
    """Whether `sentence` defines what the question asks of, as a glossary does: it opens with
    question terms alone (no function word), then a colon. A copula does not count: in an
    encyclopedia "Marles was made..." follows the article's first sentence, which it must not
    pass (PopQA lost answers)."""
    opening = _DEFINITION.match(sentence)
    if not opening:
        return False
    named = terms(opening.group(1))  # function words are no terms: one among them drops out
    return bool(named) and len(named) == len(words(opening.group(1))) and set(named) <= asked
