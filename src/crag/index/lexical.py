"""A thin BM25 over texts (bm25s), sharing crag's analyzer so every lexical part agrees."""

from __future__ import annotations

from collections.abc import Sequence

import logging

import bm25s
import numpy as np

from crag.text import terms

logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index build at DEBUG


class BM25:
    """Okapi BM25 over a fixed list of texts; `scores` gives one float per text."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.size = len(texts)
        self._model = bm25s.BM25()
        if texts:
            corpus_tokens = [terms(t) or ["\u2400"] for t in texts]
            self._model.index(bm25s.tokenization.Tokenized(*_to_ids(corpus_tokens)), show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        if not self.size:
            return np.zeros(0, dtype=np.float32)
        vocab = self._model.vocab_dict
        ids = [vocab[t] for t in terms(query) if t in vocab]
        if not ids:
            return np.zeros(self.size, dtype=np.float32)
        return self._model.get_scores(ids)

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """The `k` best (position, score) pairs with a positive score, best first."""
        scores = self.scores(query)
        k = min(k, self.size)
        if k == 0:
            return []
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(int(i), float(scores[i])) for i in best if scores[i] > 0]


def _to_ids(corpus_tokens: list[list[str]]) -> tuple[list[list[int]], dict[str, int]]:
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in corpus_tokens]
    return ids, vocab
