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

from crag._compat.nltk import add_abbreviations

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
    tokenizer = PunktTokenizer("english")
    add_abbreviations(tokenizer, _ABBREVIATIONS)  # Punkt's only way to add some: a private one
    return tokenizer


# Abbreviations Punkt's English tables lack, which technical writing is full of: without them
# "(e.g. pypdf)" and "Fig. 3 shows" end a sentence. As Punkt keeps them: lower case, no last period.
_ABBREVIATIONS = frozenset({
    "i.e", "e.g", "cf", "approx", "fig", "figs", "eq", "eqs", "vol", "vols", "pp", "sec", "secs", "ch", "tab",
    "ref", "refs", "viz", "resp", "incl", "al", "ca", "nr",
})


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

    A sentence survives abbreviations ("i.e.", "(e.g.", "Fig. 3") and numbering ("1. Open",
    "2.1.6 Masks"); a table's row is one sentence (a separator row none); a list, with the line
    that leads into it ("The steps are:"), is one sentence while it is short (`LIST_CHARS`).

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
    return [offset for span in _spans(text) for offset in span]


LIST_CHARS = 600
"""The longest list kept as one sentence with its lead-in: a longer one is a sentence an item."""

# A line that is a list's item ("- red", "• red", "1. Open", "2) Read", "b) Close") or a table's
# row ("| Berries | 150 |").
_ITEM = re.compile(r"(?:[-*•▪◦‣·–]|\(?(?:\d{1,3}(?:\.\d{1,3})*|[a-z])[.)])\s")
_ROW = re.compile(r"\|.*\||.+ \| .+")
_MARKDOWN_ROW = re.compile(r"\|.*\|")
_SEPARATOR = re.compile(r"[|:\- ]*-[|:\- ]*")  # a Markdown table's "|---|:--:|"
_MARKER = re.compile(r"\(?(?:\d{1,3}(?:\.\d{1,3})*|[A-Za-z]|[ivxIVX]{1,4})[.)]?|[-*•▪◦‣·–]")
# A sentence that ends at a short word with a period and goes on in lower case ("... approx.
# five"), or at "No." and goes on with a number ("No. 5"): one sentence that Punkt cut.
_ABBREVIATED = re.compile(r"(?:\b[A-Za-z]{1,6}|(?:\b[A-Za-z]\.)+[A-Za-z])\.$")
_GOES_ON = re.compile(r"[a-z]")
_NUMBER_SIGN = re.compile(r"\b(?:No|Nos|Nr|p)\.$")
# A list's marker that Punkt left at the end of the sentence before its item ("The steps are: 1.").
_TRAILING_MARKER = re.compile(r"(?<=[:;])\s+\(?(?:\d{1,3}|[a-z])[.)]$")


def _spans(text: str) -> list[tuple[int, int]]:
    flat = _normalized(text)
    spans: list[tuple[int, int]] = []
    offset = 0
    for block in flat.split("\n\n"):
        spans += [(offset + start, offset + end) for start, end in _block_spans(block)]
        offset += len(block) + 2  # the "\n\n" that joins blocks in `_normalized`
    return _lists_whole(flat, spans)


def _block_spans(block: str) -> list[tuple[int, int]]:
    """One paragraph's sentences; its lines are a list's items or a table's rows when it kept
    them apart (`_blocks`)."""
    spans: list[tuple[int, int]] = []
    offset = 0
    lines = block.split("\n")
    for line in lines:
        # A table's row is cells, not sentences: a Markdown row, or a row among rows. A line
        # alone with a bar in it is prose as often ("Paultons Park | Home of Peppa Pig World").
        if _MARKDOWN_ROW.fullmatch(line) or (len(lines) > 1 and _ROW.fullmatch(line)):
            if not _SEPARATOR.fullmatch(line):
                spans.append((offset, offset + len(line)))
        else:
            spans += [(offset + a, offset + b) for a, b in _mended(line, list(_punkt().span_tokenize(line)))]
        offset += len(line) + 1
    return [(a, b) for a, b in spans if block[a:b].strip()]


def _mended(line: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Punkt's sentences of a line (`spans` into it), joined again where it cut at an
    abbreviation or a number, and a list's marker moved to the item it numbers."""
    mended: list[tuple[int, int]] = []
    for start, end in spans:
        if mended:
            before, now = line[mended[-1][0] : mended[-1][1]], line[start:end]
            marker = _TRAILING_MARKER.search(before)
            if marker:  # "The steps are: 1." + "Open the file.": the marker goes with its item
                mended[-1] = (mended[-1][0], mended[-1][0] + marker.start())
                start = mended[-1][0] + marker.start() + len(marker.group()) - len(marker.group().lstrip())
            # A list marker alone ("1.", "2.1.6") belongs to what follows it; an abbreviation
            # followed by lower case does not end a sentence, nor "No." followed by a number.
            elif (_MARKER.fullmatch(before) or (_ABBREVIATED.search(before) and _GOES_ON.match(now))
                  or (_NUMBER_SIGN.search(before) and now[:1].isdigit())):
                mended[-1] = (mended[-1][0], end)
                continue
        mended.append((start, end))
    return mended


def _lists_whole(flat: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """A sentence that leads into a list ("The steps are:") joined with all the list's items when
    the whole is at most `LIST_CHARS`: a list kept whole answers "what are the three ...?"."""
    joined: list[tuple[int, int]] = []
    i = 0
    while i < len(spans):
        start, end = spans[i]
        i += 1
        if flat[start:end].endswith(":"):
            j = i
            while j < len(spans) and _ITEM.match(flat[spans[j][0] : spans[j][1]] + " "):
                j += 1
            if j - i >= 2 and spans[j - 1][1] - start <= LIST_CHARS:  # a list has two items at least
                end, i = spans[j - 1][1], j
        joined.append((start, end))
    return joined


def _blocks(text: str) -> list[str]:
    """Paragraphs with their whitespace normalized, none empty; a paragraph whose lines are a
    list's items or a table's rows (two of them at least) keeps its line breaks, each in place
    of the space it would be, so that offsets into it are the same either way."""
    blocks = []
    for raw in re.split(r"\n\s*\n", text):
        lines = [" ".join(line.split()) for line in raw.splitlines()]
        lines = [line for line in lines if line]
        if not lines:
            continue
        structured = sum(bool(_ITEM.match(line + " ") or _ROW.fullmatch(line)) for line in lines) >= 2
        blocks.append(("\n" if structured else " ").join(lines))
    return blocks


def _normalized(text: str) -> str:
    return "\n\n".join(_blocks(text))


@lru_cache(maxsize=8192)
def _split(text: str) -> tuple[str, ...]:
    # Cached: the chunks a question retrieves are graded, refined and often retrieved again
    # by the next question, and Punkt is the costliest part of scoring them. Chunks ingested
    # with their spans never come here; web results and older indexes do. 8192 of ~1 KB: a few MB.
    flat = _normalized(text)
    return tuple(flat[start:end] for start, end in _spans(text))


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
