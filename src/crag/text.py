"""Lexical tools shared by the offline components: sentences, terms, IDF statistics.

Nothing here downloads anything: sentences use the Punkt tables that llama-index-core
bundles, terms use a stopword list kept here (NLTK's is not bundled) and PyStemmer.
"""

from __future__ import annotations

import math
import os
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import Stemmer

# Function words and question words: they carry no topic, so they neither count as
# evidence of relevance nor belong in a search query.
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing done down during each
    few for from further had has have having he her here hers herself him himself his how i
    if in into is it its itself just may me might more most much must my myself no nor not
    of off on once only or other our ours ourselves out over own same shall she should so
    some such than that the their theirs them themselves then there these they this those
    through to too under until up upon us very was we were what whatever when where whereas
    which while who whom whose why will with would you your yours yourself yourselves
    according called many name named one ones s t also""".split()
)

# A word, and apart from it (not captured) a possessive or contracted ending: "lumen's" -> "lumen".
_WORD = re.compile(r"([^\W_]+)(?:['’][^\W_]+)?")


class _PerThread(threading.local):
    stemmer: Stemmer.Stemmer | None = None


_local = _PerThread()


def _stemmer() -> Stemmer.Stemmer:
    """This thread's stemmer: a Snowball stemmer keeps state between words, and PyStemmer
    says an instance must never be used by two threads at once (steps run in a pool)."""
    if _local.stemmer is None:
        _local.stemmer = Stemmer.Stemmer("english")
    return _local.stemmer


# Invisible in print, but they split a word for every comparison: a soft hyphen (U+00AD) where a
# word may break, a zero-width space (U+200B), a byte-order mark inside the text (U+FEFF).
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\ufeff"))


def as_typed(text: str) -> str:
    """`text` as people type it: Unicode NFKC (ligatures "ﬃ" -> "ffi", full-width "Ｈ１０" ->
    "H10", a non-breaking space -> a space) without soft hyphens and zero-width spaces.

    Ingest applies it to every document's text and a question passes through it
    (`check_query`), so a word typed in a question is the word the index holds: PDFs set in
    TeX or by Word keep "ﬀ" and "ﬁ" as single characters, which no one types.
    """
    if text.isascii():  # most text: nothing to do, and no copy
        return text
    text = text.translate(_INVISIBLE)
    return text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)


def words(text: str) -> list[str]:
    """Lower-cased word tokens, possessive endings dropped."""
    return _WORD.findall(text.lower())


def terms(text: str) -> list[str]:
    """Stemmed content terms: what relevance scoring and keyword queries are built from."""
    kept = [w for w in words(text) if w not in STOPWORDS]
    return _stemmer().stemWords(kept)


_PUNKT: list = []  # Punkt's English tokenizer, once loaded
_PUNKT_LOADING = threading.Lock()


def _punkt():  # noqa: ANN202 - nltk has no stubs
    """Punkt's English tokenizer, loaded by the first caller; callers meanwhile wait for it."""
    if not _PUNKT:
        with _PUNKT_LOADING:
            if not _PUNKT:
                _PUNKT.append(_load_punkt())
    return _PUNKT[0]


def _load_punkt():
    import llama_index.core
    import nltk
    from nltk.tokenize import PunktTokenizer

    bundled = os.path.join(os.path.dirname(llama_index.core.__file__), "_static", "nltk_cache")
    if bundled not in nltk.data.path:
        nltk.data.path.insert(0, bundled)
    return PunktTokenizer("english")


def warm_up() -> None:
    """Load the stemmer, and start loading Punkt in a thread of its own.

    Importing nltk and reading Punkt's tables takes about 0.25 s, and most questions split no
    text (ingest stored every chunk's sentence spans; web results and replaced texts are split),
    so a first question need not wait for them: a split waits only if they are still loading.
    `crag serve` waits for them before it accepts a request (`wait_until_loaded`).
    """
    _stemmer()
    if not _PUNKT and not _PUNKT_LOADING.locked():
        threading.Thread(target=_punkt, name="crag-punkt", daemon=True).start()


def wait_until_loaded() -> None:
    """Return once Punkt is loaded (what `warm_up` started, or now)."""
    _punkt()


SPANS_KEY = "sentence_spans"  # a chunk's metadata key for `sentence_spans`, written at ingest


def sentences(text: str, spans: Sequence[int] | None = None) -> list[str]:
    """Split text into sentences (Punkt, offline), each stripped, none empty.

    `spans` are the offsets `sentence_spans(text)` gave at ingest: with them nothing is split
    again. Spans that do not fit the text (it was replaced since, e.g. by a sentence window)
    are ignored.
    """
    if spans and len(spans) % 2 == 0:
        flat = _normalized(text)
        if spans[-1] <= len(flat):
            return [flat[spans[i] : spans[i + 1]] for i in range(0, len(spans), 2)]
    return list(_split(text))


def sentence_spans(text: str) -> list[int]:
    """`sentences(text)` as flat [start, end, start, end, ...] offsets into the text with its
    whitespace normalized: what ingest stores so that no question splits a chunk again."""
    spans: list[int] = []
    offset = 0
    for block in _blocks(text):
        for start, end in _punkt().span_tokenize(block):
            piece = block[start:end]
            if piece.strip():
                lead = len(piece) - len(piece.lstrip())
                spans += [offset + start + lead, offset + start + len(piece.rstrip())]
        offset += len(block) + 2  # the "\n\n" that joins blocks in `_normalized`
    return spans


def _blocks(text: str) -> list[str]:
    """Paragraphs with their whitespace normalized, none empty."""
    return [block for raw in re.split(r"\n\s*\n", text) if (block := " ".join(raw.split()))]


def _normalized(text: str) -> str:
    return "\n\n".join(_blocks(text))


@lru_cache(maxsize=8192)
def _split(text: str) -> tuple[str, ...]:
    # Cached: the chunks a question retrieves are graded, refined and often retrieved again
    # by the next question, and Punkt is the costliest part of scoring them. Chunks ingested
    # with their spans never come here; web results and older indexes do. 8192 of ~1 KB: a few MB.
    return tuple(s.strip() for block in _blocks(text) for s in _punkt().tokenize(block) if s.strip())


@dataclass
class TermStats:
    """Document frequencies of a corpus, for IDF weights that do not depend on the query."""

    num_docs: int = 0
    doc_freq: Mapping[str, int] = field(default_factory=Counter)  # a Counter while being built

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> TermStats:
        stats = cls()
        for text in texts:
            stats.add(text)
        return stats

    def add(self, text: str) -> None:
        self.num_docs += 1
        self._idf.clear()
        self.doc_freq.update(set(terms(text)))  # type: ignore[attr-defined] - built from texts: a Counter

    def idf(self, term: str) -> float:
        """Smoothed IDF in (0, ~log N]; a term never seen gets the highest weight."""
        known = self._idf.get(term)
        if known is None:  # each term's weight is computed once: every strip of a run asks again
            n = max(self.num_docs, 1)
            known = self._idf[term] = math.log(1.0 + (n + 1) / (self.doc_freq.get(term, 0) + 0.5))
        return known

    def has_rare(self, terms: Iterable[str], *, common: float = 0.01, floor: int = 5) -> bool:
        """Whether some term is rare: in at most `common` of the chunks, or `floor` of them in a
        small corpus. A name with a rare word names one thing ("Crater Lake"); a name of common
        words only ("American", "Normans" in a history of the Normans) names many passages."""
        limit = max(float(floor), common * self.num_docs)
        return any(self.doc_freq.get(t, 0) <= limit for t in terms)

    def __post_init__(self) -> None:
        self._idf: dict[str, float] = {}

    def to_dict(self) -> dict[str, object]:
        return {"num_docs": self.num_docs, "doc_freq": dict(self.doc_freq)}

    @classmethod
    def from_dict(cls, data: dict) -> TermStats:
        return cls(num_docs=int(data["num_docs"]), doc_freq=Counter(data["doc_freq"]))


def weighted_coverage(
    query_terms: Sequence[str],
    text_terms: set[str],
    stats: TermStats,
    *,
    partial: float = 0.0,
    min_prefix: int = 4,
) -> float:
    """Share of the query's IDF mass whose terms occur in the text, in [0, 1].

    Args:
        query_terms, text_terms: stemmed terms (`terms`).
        stats: IDF weights.
        partial: credit, as a share of its weight, for a query term that is absent but
            related by prefix to a text term (`related_by_prefix`); 0 counts exact
            matches only.
        min_prefix: the shortest prefix that relates two terms.
    """
    # Sorted, so the float sum (and a score rounded from it) is the same in every process.
    unique = sorted(set(query_terms))
    total = sum(stats.idf(t) for t in unique)
    if total == 0.0:
        return 0.0
    covered = 0.0
    extended: set[str] | None = None  # the text terms' proper prefixes, made when first needed
    for term in unique:
        if term in text_terms:
            covered += stats.idf(term)
        elif partial and len(term) >= min_prefix:
            if extended is None:
                extended = {t[:k] for t in text_terms for k in range(min_prefix, len(t))}
            if term in extended or any(term[:k] in text_terms for k in range(min_prefix, len(term))):
                covered += partial * stats.idf(term)  # related by prefix (`related_by_prefix`)
    return covered / total


def related_by_prefix(term: str, text_terms: set[str], min_prefix: int = 4) -> bool:
    """True when one of `term` and some text term is a prefix of the other, at least
    `min_prefix` characters long.

    The Snowball stemmer leaves derivations apart ("revolutionary" -> "revolutionari",
    "revolution" -> "revolut"; "rider" -> "rider", "ride" -> "ride"), and a question
    often paraphrases its passage exactly that way.
    """
    if len(term) < min_prefix:
        return False
    if any(term[:k] in text_terms for k in range(min_prefix, len(term))):
        return True
    return any(len(t) > len(term) and t.startswith(term) for t in text_terms)
