"""Fits the cascade grader's uncertain band: the offline scores for which the model is asked.

Given, for each question, the offline evaluator's scores and the model's scores of the same
retrieved chunks, a band (low, high) sends to the model exactly the chunks whose offline score
lies in [low, high); the rest keep their offline score. The fitted band is the one that makes
the fewest model calls (with `batch`, one call per question that sends any chunk) while the verdicts still agree with model-only grading on at least
`target` of the questions (`crag calibrate --band`, `benchmarks/cost.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from crag.errors import ConfigError

Scores = Sequence[Sequence[float]]  # one list of chunk scores per question


@dataclass(frozen=True)
class BandFit:
    """A band and what it does on the questions it was fitted on."""

    low: float
    high: float
    agreement: float  # share of questions whose cascade verdict is the model-only verdict
    calls_per_question: float  # chunks sent to the model, per question
    questions: int


def _padded(scores: Scores) -> np.ndarray:
    """Questions x chunks, -inf where a question has fewer chunks (never the best, never in a band)."""
    width = max((len(q) for q in scores), default=0)
    out = np.full((len(scores), max(width, 1)), -np.inf)
    for row, q in enumerate(scores):
        out[row, : len(q)] = q
    return out


def _verdicts(best: np.ndarray, upper: float, lower: float) -> np.ndarray:
    """`decide_verdict` on each question's best grade, as codes: 2 Correct, 1 Ambiguous, 0 Incorrect."""
    best = np.where(np.isfinite(best), best, 0.0)  # no chunk: best 0.0, as decide_verdict has it
    return np.where(best >= upper, 2, np.where(best < lower, 0, 1))


def band_result(offline: Scores, model: Scores, low: float, high: float, *, upper: float, lower: float,
                batch: bool = False) -> BandFit:
    """How the band (low, high) does on these questions."""
    return _BandSearch(offline, model, upper, lower, batch).result(low, high)


class _BandSearch:
    def __init__(self, offline: Scores, model: Scores, upper: float, lower: float, batch: bool) -> None:
        self.offline, self.model = _padded(offline), _padded(model)
        self.upper, self.lower, self.batch = upper, lower, batch
        self.wanted = _verdicts(self.model.max(axis=1), upper, lower)

    def result(self, low: float, high: float) -> BandFit:
        asked = (self.offline >= low) & ((self.offline < high) | (high >= 1.0))  # as CascadeGrader
        best = np.where(asked, self.model, self.offline).max(axis=1)
        agreement = float((_verdicts(best, self.upper, self.lower) == self.wanted).mean())
        calls = asked.any(axis=1).sum() if self.batch else asked.sum()
        return BandFit(low, high, agreement, float(calls) / len(asked), len(asked))


def fit_band(offline: Scores, model: Scores, *, upper: float, lower: float, target: float = 0.95,
             step: float = 0.025, batch: bool = False) -> BandFit:
    """The band with the fewest model calls whose verdict agreement reaches `target`.

    Bands are tried on a grid of `step` over [0, 1]; of equally cheap bands the more agreeing
    one wins. Raises ConfigError when no band reaches `target` (asking the model about every
    chunk always does, so this means the scores given are inconsistent).
    """
    if len(offline) != len(model) or not offline:
        raise ConfigError("fit_band needs the offline and model scores of the same questions.")
    if not 0.0 < target <= 1.0:
        raise ConfigError(f"the target agreement must be in (0, 1], not {target}.")
    search = _BandSearch(offline, model, upper, lower, batch)
    edges = [round(float(x), 6) for x in np.arange(0.0, 1.0 + step / 2, step)]
    best: BandFit | None = None
    for i, low in enumerate(edges):
        for high in edges[i:]:
            fit = search.result(low, high)
            if fit.agreement + 1e-12 < target:
                continue
            if best is None or (fit.calls_per_question, -fit.agreement) < (best.calls_per_question, -best.agreement):
                best = fit
    if best is None:
        raise ConfigError(f"No band reaches verdict agreement {target}; lower the target.")
    return best
