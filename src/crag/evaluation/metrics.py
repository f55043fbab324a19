"""Measures: answer matching as in SQuAD/PopQA evaluation, and binary-classifier quality.

Everything here is a pure function of its arguments, so it can be checked on
hand-made cases.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from pydantic import BaseModel, Field

_ARTICLES = re.compile(r"\b(a|an|the)\b")
# "[1]", "[2, 3]", "[1-2]": the synthesizers' citation markers, which name sources, not words.
_CITATION = re.compile(r"\[\d+(?:\s*[,;–-]\s*\d+)*\]")


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces.

    Two departures, both so that matching on word boundaries works: punctuation becomes
    a space rather than nothing ("Zhenjin's" keeps the word "zhenjin"), and it is every
    Unicode punctuation character, not only ASCII (curly quotes, dashes).
    """
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if unicodedata.category(c).startswith("P") else c for c in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def contains_answer(text: str, answers: Iterable[str]) -> bool:
    """True when some gold answer occurs in `text`, both normalised, on word boundaries.

    This is the PopQA/CRAG convention ("a gold answer is a substring of the output")
    on normalised text, with one guard: the match must start and end at word
    boundaries, so the gold answer "k" does not match "Kublai" and "1291" does not
    match "12910". Answers that normalise to nothing (e.g. "the") never match.
    """
    haystack = f" {normalize_answer(text)} "
    for answer in answers:
        needle = normalize_answer(answer)
        if needle and f" {needle} " in haystack:
            return True
    return False


def answer_sentences(answer: str) -> list[str]:
    """The answer's sentences (`crag.text.sentences`), with citation markers taken out.

    Markers go before the split: a marker between two sentences would otherwise open the
    second one ("[1] Lucy Saunders ..."), and a sentence left with only markers is dropped.
    """
    from crag.text import sentences  # Punkt: loaded only when answers are scored

    return [s for s in sentences(_CITATION.sub(" ", answer)) if normalize_answer(s)]


def first_sentence_contains_answer(answer: str, answers: Iterable[str]) -> bool:
    """True when the answer's first sentence holds a gold answer (as `contains_answer`).

    Stricter than `contains_answer` on the whole answer: a long answer that mentions the
    gold string somewhere among many sentences does not count.
    """
    first = answer_sentences(answer)[:1]
    return bool(first) and contains_answer(first[0], answers)


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD's token F1 of two strings, on `normalize_answer` tokens (bags, not sets).

    When either side has no tokens, F1 is 1 if both have none and 0 otherwise, as in
    SQuAD's evaluation script.
    """
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not expected:
        return float(predicted == expected)
    same = sum((Counter(predicted) & Counter(expected)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def best_sentence_f1(answer: str, answers: Iterable[str]) -> float:
    """Token F1 of the answer's best sentence against its best-matching gold answer.

    Rewards a short, exact answer: a sentence of twenty words holding a two-word gold
    answer scores about 0.18, the bare gold answer 1.0. An answer without sentences, or a
    question without gold answers, scores 0.
    """
    golds = list(answers)
    return max(
        (token_f1(s, g) for s in answer_sentences(answer) for g in golds), default=0.0
    )


def roc_auc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """Probability that a random positive outscores a random negative (ties count half).

    Returns None when either class is absent: the measure is undefined there.
    """
    y = np.asarray(labels, dtype=bool)
    s = np.asarray(scores, dtype=float)
    positives, negatives = int(y.sum()), int((~y).sum())
    if positives == 0 or negatives == 0:
        return None
    # Mann-Whitney U from average ranks, so ties between classes count half.
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    first_rank = np.cumsum(counts) - counts + 1
    average_rank = first_rank + (counts - 1) / 2.0
    ranks = average_rank[inverse]
    u = ranks[y].sum() - positives * (positives + 1) / 2.0
    return float(u / (positives * negatives))


class BinaryReport(BaseModel):
    """How well scores at a threshold separate two classes (score >= threshold: positive).

    On imbalanced labels accuracy flatters: `majority_accuracy` is what always answering
    the larger class scores, and `balanced_accuracy` (the mean of recall and
    specificity) is 0.5 for any constant answer.
    """

    n: int
    positives: int
    threshold: float
    accuracy: float | None
    balanced_accuracy: float | None
    precision: float | None
    recall: float | None
    specificity: float | None
    roc_auc: float | None
    majority_accuracy: float | None


def binary_report(
    labels: Sequence[bool], scores: Sequence[float], threshold: float
) -> BinaryReport:
    """Accuracy, balanced accuracy, precision, recall, specificity and ROC AUC at `threshold`."""
    y = np.asarray(labels, dtype=bool)
    predicted = np.asarray(scores, dtype=float) >= threshold
    n, positives = len(y), int(y.sum())
    tp = int((predicted & y).sum())
    tn = int((~predicted & ~y).sum())
    recall = _ratio(tp, positives)
    specificity = _ratio(tn, n - positives)
    balanced = None if recall is None or specificity is None else (recall + specificity) / 2
    return BinaryReport(
        n=n,
        positives=positives,
        threshold=threshold,
        accuracy=_ratio(tp + tn, n),
        balanced_accuracy=balanced,
        precision=_ratio(tp, int(predicted.sum())),
        recall=recall,
        specificity=specificity,
        roc_auc=roc_auc(y, scores),
        majority_accuracy=_ratio(max(positives, n - positives), n),
    )


class VerdictAgreement(BaseModel):
    """Per question: does the verdict agree with whether the gold passage was retrieved?

    Correct is right when the gold passage is among the retrieved chunks, Incorrect when
    it is not; Ambiguous is counted as neither (it hedges: it searches the web and keeps
    the internal knowledge too).
    """

    gold_retrieved: dict[str, int] = Field(
        description="Verdict counts when the gold passage was retrieved."
    )
    gold_not_retrieved: dict[str, int] = Field(description="Verdict counts when it was not.")
    accuracy: float | None = Field(
        description="Correct-when-retrieved plus Incorrect-when-not, over all."
    )
    decisive_accuracy: float | None = Field(
        description="The same, over the questions not judged Ambiguous."
    )
    unsafe_correct: float | None = Field(
        description="Share of gold-not-retrieved questions judged Correct."
    )
    roc_auc: float | None = Field(
        description="The best chunk grade as a score for 'gold retrieved'."
    )


VERDICTS = ("correct", "ambiguous", "incorrect")


def verdict_agreement(
    verdicts: Sequence[str], gold_retrieved: Sequence[bool], best_scores: Sequence[float]
) -> VerdictAgreement:
    """Verdicts ("correct", "ambiguous", "incorrect") against retrieval truth, one per question."""
    rows = list(zip(verdicts, gold_retrieved, best_scores))
    hit = [v for v, retrieved, _ in rows if retrieved]
    missed = [v for v, retrieved, _ in rows if not retrieved]
    right = hit.count("correct") + missed.count("incorrect")
    decisive = sum(v != "ambiguous" for v, _, _ in rows)
    return VerdictAgreement(
        gold_retrieved={v: hit.count(v) for v in VERDICTS},
        gold_not_retrieved={v: missed.count(v) for v in VERDICTS},
        accuracy=_ratio(right, len(rows)),
        decisive_accuracy=_ratio(right, decisive),
        unsafe_correct=_ratio(missed.count("correct"), len(missed)),
        roc_auc=roc_auc(list(gold_retrieved), list(best_scores)),
    )


def rate(flags: Iterable[bool | None]) -> float | None:
    """Share of True among the flags that are not None; None when there are none."""
    known = [bool(f) for f in flags if f is not None]
    return _ratio(sum(known), len(known))


def mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return float(np.mean(values)) if values else None


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0-100, linear interpolation); None for no values."""
    values = list(values)
    return float(np.percentile(values, q)) if values else None


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None
