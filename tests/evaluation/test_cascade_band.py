"""`crag calibrate --band` fits the cascade's uncertain band: the fewest model calls for a target
verdict agreement with model-only grading, judged by the same rule the workflow uses."""

from __future__ import annotations

import random

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from crag.errors import ConfigError
from crag.evaluation.cascade import band_result, fit_band
from crag.events import Grade
from crag.steps.grading import RATING_THRESHOLDS, CascadeGrader, decide_verdict

UPPER, LOWER = RATING_THRESHOLDS  # a cascade reads its grades on the model's scale


class TableGrader:
    """Grades each chunk with the score its id names in `table`; counts the chunks it saw."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table, self.seen = table, 0

    async def grade(self, query: str, chunks: list[NodeWithScore]) -> list[Grade]:
        self.seen += len(chunks)
        return [Grade(chunk_id=c.node.node_id, score=self.table[c.node.node_id], grader="table") for c in chunks]


def questions(n: int, seed: int = 0) -> tuple[list[list[float]], list[list[float]]]:
    """Offline scores, and model scores that mostly agree with them."""
    rng = random.Random(seed)
    offline = [[rng.random() for _ in range(rng.randint(1, 5))] for _ in range(n)]
    model = [[min(1.0, max(0.0, o + rng.gauss(0, 0.25))) for o in q] for q in offline]
    return offline, model


async def test_a_bands_agreement_and_calls_are_what_the_cascade_grader_does() -> None:
    offline, model = questions(60)
    low, high = 0.3, 0.7
    agree = calls = 0
    for q, (o, m) in enumerate(zip(offline, model)):
        chunks = [NodeWithScore(node=TextNode(id_=f"{q}-{i}", text="x")) for i in range(len(o))]
        ids = [c.node.node_id for c in chunks]
        asked = TableGrader(dict(zip(ids, m)))
        cascade = CascadeGrader(TableGrader(dict(zip(ids, o))), asked, band=(low, high))
        grades = await cascade.grade("q", chunks)
        model_only = await TableGrader(dict(zip(ids, m))).grade("q", chunks)
        agree += decide_verdict(grades, UPPER, LOWER) is decide_verdict(model_only, UPPER, LOWER)
        calls += asked.seen
    fit = band_result(offline, model, low, high, upper=UPPER, lower=LOWER)
    assert fit.agreement == pytest.approx(agree / len(offline))
    assert fit.calls_per_question == pytest.approx(calls / len(offline))


def test_the_fitted_band_reaches_the_target_with_the_fewest_calls() -> None:
    offline, model = questions(300)
    fit = fit_band(offline, model, upper=UPPER, lower=LOWER, target=0.95)
    assert fit.agreement >= 0.95
    everything = band_result(offline, model, 0.0, 1.0, upper=UPPER, lower=LOWER)
    assert everything.agreement == 1.0 and fit.calls_per_question < everything.calls_per_question
    for low, high in [(fit.low + 0.025, fit.high), (fit.low, fit.high - 0.025)]:
        narrower = band_result(offline, model, low, high, upper=UPPER, lower=LOWER)
        assert narrower.agreement < 0.95 or narrower.calls_per_question >= fit.calls_per_question


def test_a_higher_target_costs_at_least_as_many_calls() -> None:
    offline, model = questions(200, seed=3)
    cheap = fit_band(offline, model, upper=UPPER, lower=LOWER, target=0.8)
    sure = fit_band(offline, model, upper=UPPER, lower=LOWER, target=0.99)
    assert cheap.calls_per_question <= sure.calls_per_question


def test_with_batch_grading_a_question_costs_one_call_whatever_the_band_sends() -> None:
    offline, model = questions(100, seed=5)
    each = band_result(offline, model, 0.2, 0.8, upper=UPPER, lower=LOWER)
    batched = band_result(offline, model, 0.2, 0.8, upper=UPPER, lower=LOWER, batch=True)
    assert batched.agreement == each.agreement
    sending = sum(any(0.2 <= s < 0.8 for s in q) for q in offline)
    assert batched.calls_per_question == pytest.approx(sending / 100)
    assert batched.calls_per_question < each.calls_per_question


def test_mismatched_inputs_are_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="same questions"):
        fit_band([[0.5]], [], upper=UPPER, lower=LOWER)
    with pytest.raises(ConfigError, match="target agreement"):
        fit_band([[0.5]], [[0.5]], upper=UPPER, lower=LOWER, target=1.5)
