"""What the offline evaluator knows about a (question, chunk) pair, as numbers a fitted model weighs.

Every feature but one is absolute: it reads the question and one chunk (with its title). The
last, `window_margin`, compares the chunk with the others graded beside it: a gold passage
usually stands out from its neighbours, which share the article's words but not the asked
fact (cross-validated, it raised balanced accuracy on every dev set at the shipped `upper`).
The model is fitted on retrievals half of which hold no gold passage, so a chunk that only
leads weak neighbours still grades low. The corpus enters only through its term statistics.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from crag.text import TermStats, sentences, terms, words

# The order is the weights file's order; a new feature needs a refit (`python -m crag.evaluation.fit`).
NAMES = (
    "whole",  # IDF-weighted coverage of the question's terms by the chunk and its title
    "window",  # ... by its best two-sentence window (an answer sits in one place)
    "strip",  # ... by its best single sentence, without the title: the strip the refiner keeps
    "phrase",  # share of the question's consecutive term pairs found in the chunk
    "title",  # ... coverage of the question by the title alone: the passage is about what is asked
    "named",  # the question names the document (every title word, one of them rare)
    "entities",  # share of the question's names (capitalised runs) found whole in chunk or title
    "rare",  # coverage of the question's two rarest terms: a missing rare term is a strong no
    "absent",  # share of the question's distinct terms the chunk and title lack, even by prefix
    "absent_idf",  # the highest IDF among them, over the corpus's highest: one rare word missing
    "bm25",  # BM25 of the chunk, divided by the most the question's terms could score
    "answer_type",  # the best window holds a year / number / new name when asked when / how many / who
    "length",  # log of the question's distinct content terms: long questions are covered less
    "window_margin",  # "window" minus the best "window" of the other chunks graded with it (`with_margins`)
)
_WINDOW = NAMES.index("window")

_K1 = 1.2  # BM25's saturation, as the index's own BM25 uses

_YEAR = re.compile(
    r"\b(1\d{3}|20\d{2})s?\b|\b(january|february|march|april|may|june|july|august|"
    r"september|october|november|december|century)\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(
    r"\b\d[\d,.]*\b|\b(one|two|three|four|five|six|seven|eight|nine|ten|hundred|"
    r"thousand|million|billion)\b",
    re.IGNORECASE,
)
_CAPITALISED = re.compile(r"\b[A-Z][\w'’-]+")
_ASKS_WHEN = re.compile(r"\b(when|what year|which year|what century|what decade)\b", re.IGNORECASE)
_ASKS_AMOUNT = re.compile(
    r"\bhow (many|much|long|old|far|large|tall|big)\b|\bwhat (percentage|number|amount)\b", re.IGNORECASE
)
_ASKS_NAME = re.compile(r"\b(who|whom|whose|where)\b", re.IGNORECASE)


class Question:
    """What every chunk of one question is compared with, computed once per question."""

    def __init__(self, query: str, stats: TermStats) -> None:
        self.text = query
        self.terms = _cached_terms(query)
        self.unique = sorted(set(self.terms))
        self.pairs = set(zip(self.terms, self.terms[1:]))
        self.rarest = sorted(self.unique, key=lambda t: (-stats.idf(t), t))[:2]
        self.names = [frozenset(n) for n in _names(query)]
        self.words = set(words(query))
        self.bm25_top = sum(stats.idf(t) * (_K1 + 1) for t in self.unique)
        self.idf = np.array([stats.idf(t) for t in self.unique])
        total = self.idf.sum()
        # IDF shares: a coverage is credits @ weight, as `crag.text.weighted_coverage` sums it.
        self.weight = self.idf / total if total else self.idf
        rare = np.where(np.isin(self.unique, self.rarest), self.idf, 0.0)
        self.rare_weight = rare / rare.sum() if rare.sum() else rare
        self.top_idf = math.log(1.0 + (max(stats.num_docs, 1) + 1) / 0.5)  # a term no chunk has


def chunk_features(
    question: Question, text: str, title: str | None, stats: TermStats, *, named: bool,
    spans: Sequence[int] | None = None, partial: float = 0.8, min_prefix: int = 4, window: int = 2,
) -> list[float]:
    """The absolute `NAMES` features of one chunk (all but the last), in that order; `title` is
    what names its subject (title and headings) and `named` whether the question names its document."""
    if not question.terms:
        return [0.0] * (len(NAMES) - 1)
    title_terms = set(_cached_terms(title)) if title else set()
    split = sentences(text, spans)
    per_sentence = [terms(s) for s in split] or [[]]
    text_terms = [t for sentence in per_sentence for t in sentence]
    have = set(text_terms) | title_terms
    related = _related(question.unique, have, min_prefix) if partial else {}
    # Each question term's credit in each sentence (1 present, `partial` related by prefix),
    # the title last: a union's credit is the most any of its parts gives, so every coverage
    # below is a max and a dot product, not a fresh pass over the words.
    credit = np.array([_credits(question.unique, set(s), related, partial) for s in per_sentence])
    titled = _credits(question.unique, title_terms, related, partial)
    weight = question.weight
    windows = [np.maximum(credit[i : i + window].max(axis=0), titled) for i in range(len(credit))]
    window_covers = [float(w @ weight) for w in windows]
    best = max(range(len(windows)), key=window_covers.__getitem__)
    whole = np.maximum(credit.max(axis=0), titled)
    absent = question.idf[whole == 0.0]
    tf = Counter(text_terms)
    bm25 = sum(stats.idf(t) * tf[t] * (_K1 + 1) / (tf[t] + _K1) for t in question.unique)
    return [
        float(whole @ weight),
        float(window_covers[best]),
        float((credit @ weight).max()),
        len(question.pairs & set(zip(text_terms, text_terms[1:]))) / len(question.pairs) if question.pairs else 0.0,
        float(titled @ weight),
        float(named),
        sum(n <= have for n in question.names) / len(question.names) if question.names else 0.0,
        float(whole @ question.rare_weight),
        len(absent) / len(question.unique),
        float(absent.max(initial=0.0)) / question.top_idf,
        bm25 / question.bm25_top if question.bm25_top else 0.0,
        _answer_type(question, " ".join(split[best : best + window])),
        math.log1p(len(question.unique)),
    ]


def with_margins(rows: np.ndarray) -> np.ndarray:
    """`rows` (one chunk each, `chunk_features` of the chunks graded together) with
    `window_margin` appended: how far each chunk's best window leads the best other one's (a
    chunk graded alone leads nothing: 0)."""
    window = rows[:, _WINDOW]
    if len(window) < 2:
        return np.column_stack([rows, np.zeros(len(window))])
    top_two = np.sort(window)[-2:]
    best_other = np.where(window == top_two[1], top_two[0], top_two[1])
    return np.column_stack([rows, window - best_other])


def _credits(wanted: Sequence[str], have: set[str], related: dict[str, set[str]], partial: float) -> np.ndarray:
    """Per wanted term: 1 when `have` holds it, `partial` when it holds a term related by
    prefix (as `crag.text.weighted_coverage` counts it), else 0."""
    return np.array([1.0 if t in have else partial if related.get(t, _NONE) & have else 0.0 for t in wanted])


def _related(wanted: Sequence[str], have: set[str], min_prefix: int) -> dict[str, set[str]]:
    """The terms of `have` related by prefix to each wanted term it lacks (`crag.text.related_by_prefix`),
    found once per chunk: each sentence then only intersects sets."""
    longer: dict[str, set[str]] = {}  # proper prefix -> the terms it begins
    for term in have:
        for k in range(min_prefix, len(term)):
            longer.setdefault(term[:k], set()).add(term)
    out = {}
    for t in wanted:
        if t in have or len(t) < min_prefix:
            continue
        found = {t[:k] for k in range(min_prefix, len(t))} & have | longer.get(t, _NONE)
        if found:
            out[t] = found
    return out


_NONE: set[str] = set()


def _answer_type(question: Question, window: str) -> float:
    """1 when the window holds a candidate of the type the question asks for, else 0."""
    if _ASKS_WHEN.search(question.text):
        return float(bool(_YEAR.search(window)))
    if _ASKS_AMOUNT.search(question.text):
        return float(bool(_NUMBER.search(window)))
    if _ASKS_NAME.search(question.text):
        return float(any(m.lower() not in question.words for m in _CAPITALISED.findall(window)))
    return 0.0


@lru_cache(maxsize=1024)
def _names(query: str) -> tuple[tuple[str, ...], ...]:
    """The terms of each name the question contains (capitalised runs, quoted titles)."""
    from crag.steps.decomposition import names_in  # the decomposer's notion of a name, shared

    return tuple(t for t in (tuple(terms(n)) for n in names_in(query)) if t)


@lru_cache(maxsize=4096)
def _cached_terms(text: str) -> tuple[str, ...]:
    """`terms` of a query or title, which every chunk of a run compares against again."""
    return tuple(terms(text))
