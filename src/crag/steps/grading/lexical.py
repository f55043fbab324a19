"""The offline relevance evaluator: no language model, a score in [0, 1] per chunk."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

import numpy as np
from llama_index.core.schema import NodeWithScore

from crag import text
from crag._offload import off_loop
from crag.events import Grade
from crag.steps.grading.features import NAMES, Question, chunk_features, with_margins
from crag.steps.grading.learned import LogisticModel, shipped_model
from crag.steps.grading.verdict import RATING_THRESHOLDS
from crag.text import SPANS_KEY, TermStats, sentences, terms, weighted_coverage


class LexicalEvaluator:
    """Offline relevance evaluator: no LLM, a score in [0, 1] per chunk.

    A chunk's grade is a logistic regression over the `features.NAMES` of the (question,
    chunk) pair, fitted on the shared dev sets (`python -m crag.evaluation.fit`; its
    cross-validated figures are in docs/guide/evaluation.md): the probability that the chunk
    is the question's gold passage. All features but `window_margin` (how far the chunk leads
    the others graded with it) are absolute. `score` is the hand-weighted relevance of a text,
    which grades strips (the refiner) and chunks where `model="hand-set"`:

    It blends three coverages of the question's content terms, IDF-weighted:
    of the whole chunk (0.4), of its best two-sentence window (0.4), since an answer
    usually sits in one place that repeats most of the question's rare terms, and of the
    question's consecutive term pairs (0.2), which rewards phrases over scattered words.
    The document title counts as part of the text: it names the entity a passage is
    about. A question term missing from the text but related to a text term by prefix
    ("revolutionary" / "revolution", "rider" / "ride": the stemmer keeps derivations
    apart) counts `partial` of its weight. When the question names the chunk's document, by
    every word of its title, one of them rare in the corpus ("Park Holme, South Australia",
    not "Normans" in a history of the Normans), the score closes `named` of its gap to 1:
    the passage is about the very thing asked of, even where the question's other half
    lies in another passage (a multi-hop question). Chunks are never compared with each
    other, so when none is about the question every score stays low.

    Each part was kept because it raised the ROC AUC against "is the gold passage" on the
    top-5 chunks of the shared dev sets, half their gold passages removed; other candidates
    were weaker (`python benchmarks/evaluator.py`; figures in docs/measured.md).

    Args:
        stats: document frequencies of the corpus, for IDF weights.
        window: sentences per window.
        partial: credit for a prefix-related term, as a share of its weight; 0 for exact only.
        min_prefix: the shortest shared prefix that relates two terms.
        named: the share of a chunk's shortfall from 1 that the question naming its
            document closes; 0 ignores titles beyond their words.
        model: the fitted weights that grade chunks: "shipped" (the package's), another
            `LogisticModel`, or "hand-set" for `score` (the grader before issue 34).
    """

    name = "lexical"

    def __init__(
        self, stats: TermStats, window: int = 2, *, partial: float = 0.8, min_prefix: int = 4,
        named: float = 0.5, model: LogisticModel | Literal["shipped", "hand-set"] = "shipped",
    ) -> None:
        self.stats = stats
        self.window = window
        self.partial = partial
        self.min_prefix = min_prefix
        self.named = named
        self.model = shipped_model() if model == "shipped" else None if model == "hand-set" else model
        # The verdict's (upper, lower): fitted with the weights; the hand-set grade's were calibrated
        # to the values a 0-10 rating is read with.
        self.thresholds = (self.model.upper, self.model.lower) if self.model else RATING_THRESHOLDS

    def score(
        self, query: str, text: str, title: str | None = None, *, split: bool = True,
        spans: Sequence[int] | None = None, subject: str | None = None,
    ) -> float:
        """Relevance of `text` to `query`; `split=False` treats `text` as one sentence,
        `spans` are its sentences as ingest found them (`crag.text.sentence_spans`), and
        `subject` is its document's title, which the question may name."""
        wanted = _cached_terms(query)
        if not wanted:
            return 0.0
        title_terms = set(_cached_terms(title)) if title else set()
        text_terms = terms(text)
        whole = self._coverage(wanted, set(text_terms) | title_terms)
        if split:
            sents = [set(terms(s)) for s in sentences(text, spans)] or [set()]
            windows = [set().union(*sents[i : i + self.window]) | title_terms for i in range(len(sents))]
            best = max(self._coverage(wanted, w) for w in windows)
        else:  # one sentence is its own only window
            best = whole
        pairs = set(zip(wanted, wanted[1:]))
        phrase = len(pairs & set(zip(text_terms, text_terms[1:]))) / len(pairs) if pairs else whole
        score = 0.4 * whole + 0.4 * best + 0.2 * phrase
        if subject and self.names_document(query, subject):
            score += self.named * (1.0 - score)
        return round(score, 4)

    def names_document(self, query: str, title: str) -> bool:
        """Whether `query` names the document titled `title`: every word of the title, one of
        them rare. A qualifier counts too: it tells namesakes apart, "Rogers Pass (Montana)"
        from "Rogers Pass (British Columbia)" (without it, hotpotqa lost answers to namesakes)."""
        named = set(_cached_terms(title))
        return bool(named) and named <= set(_cached_terms(query)) and self.stats.has_rare(named)

    def coverage(self, query: str, texts: Sequence[tuple[str, str | None]]) -> float:
        """How much of the question the (text, title) pairs cover together, in [0, 1]: the
        IDF-weighted share of its content terms found in their union. A question whose parts
        sit in two passages is covered only when both are there."""
        wanted = _cached_terms(query)
        if not wanted:
            return 0.0
        union: set[str] = set()
        for body, title in texts:
            union.update(terms(body))
            union.update(_cached_terms(title) if title else ())
        return round(self._coverage(list(wanted), union), 4)

    def _coverage(self, wanted: list[str], text_terms: set[str]) -> float:
        return weighted_coverage(wanted, text_terms, self.stats, partial=self.partial, min_prefix=self.min_prefix)

    def warm_up(self) -> None:
        """Load the sentence splitter and stemmer (the term statistics came built)."""
        text.warm_up()

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        return await off_loop(self.grade_sync, query, chunks)

    def grade_sync(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        """`grade` without the event loop: for callers already off it (the reranker)."""
        if self.model is None:
            scores = [
                self.score(query, c.node.get_content(), context_of(c.node.metadata),
                           spans=c.node.metadata.get(SPANS_KEY), subject=c.node.metadata.get("title"))
                for c in chunks
            ]
        else:
            scores = [round(float(p), 4) for p in self.model.predict(self.features(query, chunks))] if chunks else []
        return [Grade(chunk_id=c.node.node_id, score=s, grader=self.name) for c, s in zip(chunks, scores)]

    def features(self, query: str, chunks: Sequence[NodeWithScore]) -> np.ndarray:
        """The `features.NAMES` of each chunk against `query`, one row a chunk: what the model weighs."""
        question = Question(query, self.stats)
        rows = [
            chunk_features(
                question, c.node.get_content(), context_of(c.node.metadata), self.stats,
                named=bool((subject := c.node.metadata.get("title")) and self.names_document(query, subject)),
                spans=c.node.metadata.get(SPANS_KEY), partial=self.partial, min_prefix=self.min_prefix,
                window=self.window,
            )
            for c in chunks
        ]
        return with_margins(np.array(rows, dtype=float).reshape(len(rows), len(NAMES) - 1))


@lru_cache(maxsize=4096)
def _cached_terms(text: str) -> tuple[str, ...]:
    """`terms` of a query or title, which every strip of a run scores against again."""
    return tuple(terms(text))


def context_of(metadata: dict) -> str | None:
    """What names a chunk's subject besides its text: the title, the author where the file
    names one ("What is a cynic according to Ambrose Bierce?" asks for a chapter that never
    names him), and a section's headings."""
    parts = [metadata.get("title"), metadata.get("author"), metadata.get("section")]
    return " ".join(p for p in parts if p) or None
