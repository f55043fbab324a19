"""Per-split summaries of hand-made outcomes: the stricter answer scores and the support label."""

from __future__ import annotations

import pytest

from crag.evaluation.runner import ChunkJudgement, Outcome
from crag.evaluation.summary import summarize_split


def outcome(correct: bool, first: bool, f1: float, *, error: str | None = None) -> Outcome:
    return Outcome(
        system="crag",
        question_id="q",
        split="gold-present",
        correct=correct,
        first_sentence_correct=first,
        best_sentence_f1=f1,
        verdict="correct",
        error=error,
        chunks=[
            ChunkJudgement(score=0.9, is_gold=True, is_support=True, has_answer=True),
            ChunkJudgement(score=0.8, is_gold=False, is_support=True, has_answer=False),
            ChunkJudgement(score=0.1, is_gold=False, is_support=False, has_answer=False),
        ],
    )


OUTCOMES = [
    outcome(True, True, 1.0),
    outcome(True, False, 0.5),
    outcome(False, False, 0.0, error="TimeoutError: run took too long"),
]


def test_the_stricter_scores_are_means_over_every_question_a_failed_run_scoring_zero() -> None:
    summary = summarize_split(OUTCOMES, grading=True, upper=0.5)
    assert summary.answer_accuracy == pytest.approx(2 / 3)
    assert summary.first_sentence_accuracy == pytest.approx(1 / 3)
    assert summary.best_sentence_f1 == pytest.approx(1.5 / 3)


def test_the_supporting_passage_label_is_reported_only_for_multi_hop_questions() -> None:
    single = summarize_split(OUTCOMES, grading=True, upper=0.5)
    assert single.evaluator is not None and single.evaluator.is_support is None
    multi = summarize_split(OUTCOMES, grading=True, upper=0.5, multi_hop=True)
    assert multi.evaluator is not None and multi.evaluator.is_support is not None
    # Two runs without error, three chunks each: the gold one and the second hop support.
    assert (multi.evaluator.is_support.n, multi.evaluator.is_support.positives) == (6, 4)
    assert multi.evaluator.is_support.balanced_accuracy == pytest.approx(1.0)
    assert multi.evaluator.is_gold.balanced_accuracy == pytest.approx(0.75)


def test_without_outcomes_the_scores_are_unknown() -> None:
    summary = summarize_split([], grading=False, upper=0.5)
    assert summary.first_sentence_accuracy is None and summary.best_sentence_f1 is None
