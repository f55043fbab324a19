"""Lexical statistics of an index: BM25 (bm25s) and document frequencies, built at ingest.

Every lexical part of crag (BM25 retrieval, the offline grader's IDF weights, refining,
the local web search) shares one analyzer, `crag.text.terms`. Ingest keeps each chunk's
terms as ids (`ChunkTerms`), so an incremental ingest analyzes only the new chunks; the
BM25 matrix and the document frequencies are derived from those ids and saved, and a
question memory-maps them: nothing at query time reads every chunk's text.

On disk, in `<version>/lexical/`:
    terms.ids.npy, terms.indptr.npy   each chunk's term ids (CSR rows, in chunk order)
    doc_freq.npy                      chunks holding each term id
    bm25/                             bm25s' own saved index, vocab.index.json included
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np

from crag.errors import IndexNotFoundError
from crag.index.layout import DAMAGED_FILE
from crag.text import TermStats, terms

logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index build at DEBUG

_EMPTY = "\u2400"  # a chunk with no content term still needs one token in bm25s


class BM25:
    """Okapi BM25 over a fixed list of chunks; `scores` gives one float per chunk."""

    def __init__(self, texts: Sequence[str] = ()) -> None:
        """Analyze and index `texts` in memory (a local web corpus, summaries, an index in memory)."""
        built = ChunkTerms.from_texts(texts)._model()
        self._model, self.size, self._vocab = built, len(texts), built.vocab_dict if built else {}

    _saved_in: Path | None = None  # the index folder a loaded BM25 came from, named when it is damaged

    @classmethod
    def _of(cls, model: bm25s.BM25 | None, size: int) -> BM25:
        bm25 = cls.__new__(cls)
        bm25._model, bm25.size, bm25._vocab = model, size, model.vocab_dict if model else {}
        return bm25

    @classmethod
    def load(cls, folder: Path, index: Path | None = None) -> BM25:
        """The index saved in `folder`, memory-mapped: loading costs the same at any size.

        Its arrays are not read until a search, so damage inside them shows then: a search
        raises `IndexNotFoundError` naming `index` (the index folder) when one is given."""
        model = bm25s.BM25.load(str(folder), mmap=True)
        size = int(json.loads((folder / "params.index.json").read_text(encoding="utf-8"))["num_docs"])
        bm25 = cls._of(model, size)
        bm25._saved_in = index
        return bm25

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        if self._model is not None:
            self._model.save(str(folder))

    def scores(self, query: str) -> np.ndarray:
        ids = [self._vocab[t] for t in terms(query) if t in self._vocab]
        if not ids or self._model is None:
            return np.zeros(self.size, dtype=np.float32)
        try:
            return self._model.get_scores(ids)
        # Only damage does this: a saved array pointing outside itself, or a parameter file
        # whose dtype no longer names one ("\x0eloat32", found by test_fuzz).
        except (IndexError, ValueError, TypeError) as exc:
            if self._saved_in is None:
                raise
            raise IndexNotFoundError.damaged(self._saved_in, f"is unreadable (lexical/bm25: {type(exc).__name__})") from None

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """The `k` best (position, score) pairs with a positive score, best first."""
        scores = self.scores(query)
        k = min(k, self.size)
        if k == 0:
            return []
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(int(i), float(scores[i])) for i in best if scores[i] > 0]


class _Frequencies(Mapping[str, int]):
    """Document frequencies by term, read from the vocabulary and a frequency array."""

    def __init__(self, vocab: Mapping[str, int], doc_freq: np.ndarray) -> None:
        self._vocab = vocab
        self._doc_freq = doc_freq

    def __getitem__(self, term: str) -> int:
        return int(self._doc_freq[self._vocab[term]])

    def get(self, term: str, default: int = 0) -> int:  # type: ignore[override]
        position = self._vocab.get(term)
        return default if position is None else int(self._doc_freq[position])

    def __iter__(self):  # noqa: ANN204
        return iter(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab)


@dataclass
class ChunkTerms:
    """Each chunk's analyzed terms as ids into `vocab` (rows of a CSR matrix)."""

    vocab: dict[str, int]
    ids: np.ndarray  # int32, every chunk's term ids end to end
    indptr: np.ndarray  # int64, chunk i's ids are ids[indptr[i]:indptr[i + 1]]

    def __len__(self) -> int:
        return len(self.indptr) - 1

    @classmethod
    def empty(cls) -> ChunkTerms:
        return cls({}, np.zeros(0, np.int32), np.zeros(1, np.int64))

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> ChunkTerms:
        return cls.empty().extended(texts)

    def extended(self, texts: Iterable[str]) -> ChunkTerms:
        """These chunks followed by `texts`, analyzed now (the vocabulary only grows)."""
        vocab = dict(self.vocab)
        rows = [[vocab.setdefault(t, len(vocab)) for t in (terms(text) or [_EMPTY])] for text in texts]
        lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
        ids = np.fromiter((i for r in rows for i in r), np.int32, int(lengths.sum()))
        indptr = np.concatenate([self.indptr, self.indptr[-1] + np.cumsum(lengths)])
        return ChunkTerms(vocab, np.concatenate([self.ids, ids]), indptr)

    def select(self, rows: Sequence[int]) -> ChunkTerms:
        """Only the chunks at `rows`, in that order (the vocabulary is kept whole)."""
        rows = np.asarray(rows, np.int64)
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        lengths = ends - starts
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        picked = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1]) if len(rows) else np.zeros(0, np.int64)
        return ChunkTerms(self.vocab, self.ids[picked], indptr)

    def doc_freq(self) -> np.ndarray:
        """Chunks holding each term id."""
        rows = np.repeat(np.arange(len(self)), np.diff(self.indptr))
        pairs = np.unique(rows * max(len(self.vocab), 1) + self.ids)  # one (chunk, term) pair each
        return np.bincount(pairs % max(len(self.vocab), 1), minlength=len(self.vocab)).astype(np.int32)

    def _model(self) -> bm25s.BM25 | None:
        if not len(self):
            return None
        model = bm25s.BM25()
        rows = np.split(self.ids, self.indptr[1:-1])
        # bm25s adds its padding token "" to the vocabulary it is given: a copy, so this one holds
        # only terms with a frequency (the term statistics iterate over it).
        model.index(bm25s.tokenization.Tokenized([r.tolist() for r in rows], dict(self.vocab)), show_progress=False)
        return model

    def bm25(self) -> BM25:
        return BM25._of(self._model(), len(self))

    def stats(self) -> TermStats:
        return TermStats(num_docs=len(self), doc_freq=_Frequencies(self.vocab, self.doc_freq()))

    def save(self, folder: Path) -> None:
        """Write the ids, the frequencies and the BM25 index into `folder`."""
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "terms.ids.npy", self.ids)
        np.save(folder / "terms.indptr.npy", self.indptr)
        np.save(folder / "doc_freq.npy", self.doc_freq())
        (folder / "vocab.json").write_text(json.dumps(self.vocab, ensure_ascii=False), encoding="utf-8")
        self.bm25().save(folder / "bm25")

    @classmethod
    def load(cls, folder: Path) -> ChunkTerms:
        """The ids saved in `folder` (for an incremental ingest to extend)."""
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        return cls(vocab, np.load(folder / "terms.ids.npy"), np.load(folder / "terms.indptr.npy"))


class LexicalIndex:
    """What a question needs of the saved lexical statistics, loaded on first use.

    `index` is the index folder, named in the error for files that cannot be read.
    """

    def __init__(self, folder: Path, index: Path) -> None:
        self.folder = folder
        self._index = index
        self._bm25: BM25 | None = None
        self._stats: TermStats | None = None

    @property
    def bm25(self) -> BM25:
        if self._bm25 is None:
            with self._reading("lexical/bm25"):
                exists = (self.folder / "bm25" / "params.index.json").exists()
                self._bm25 = BM25.load(self.folder / "bm25", self._index) if exists else BM25._of(None, self._chunks())
        return self._bm25

    @property
    def stats(self) -> TermStats:
        if self._stats is None:
            with self._reading("lexical/vocab.json or doc_freq.npy"):
                vocab = json.loads((self.folder / "vocab.json").read_text(encoding="utf-8"))
                doc_freq = np.load(self.folder / "doc_freq.npy", mmap_mode="r")
                if not isinstance(vocab, dict) or doc_freq.ndim != 1 or len(doc_freq) != len(vocab):
                    raise ValueError("the vocabulary and its frequencies disagree")
                self._stats = TermStats(num_docs=self._chunks(), doc_freq=_Frequencies(vocab, doc_freq))
        return self._stats

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        try:
            yield
        except IndexNotFoundError:
            raise
        except (OSError, *DAMAGED_FILE) as exc:
            raise IndexNotFoundError.damaged(self._index, f"is unreadable ({what}: {type(exc).__name__})") from None

    def _chunks(self) -> int:
        return len(np.load(self.folder / "terms.indptr.npy", mmap_mode="r")) - 1
