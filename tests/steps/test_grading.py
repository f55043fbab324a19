"""Graders: the offline evaluator judges relevance offline; the LLM grader is concurrent and robust."""

from __future__ import annotations

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from crag import Settings, Verdict
from crag.events import Grade
from crag.steps.grading import (
    RATING_THRESHOLDS,
    CascadeGrader,
    LexicalEvaluator,
    LLMGrader,
    decide_verdict,
    thresholds_of,
)
from crag.steps.grading.features import NAMES
from crag.steps.grading.learned import LogisticModel, shipped_model
from crag.testing import FakeLLM
from crag.text import TermStats

CORPUS = [
    "The Eiffel Tower in Paris was completed in 1889 for the World's Fair.",
    "Mount Everest is the highest mountain above sea level, in the Himalayas.",
    "The Great Barrier Reef lies off the coast of Queensland, Australia.",
]


def chunks(*texts: str) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(id_=f"c{i}", text=t), score=1.0) for i, t in enumerate(texts)]


def grades(*scores: float) -> list[Grade]:
    return [Grade(chunk_id=str(i), score=s, grader="t") for i, s in enumerate(scores)]


def test_verdict_follows_the_two_thresholds() -> None:
    assert decide_verdict(grades(0.1, 0.7), upper=0.6, lower=0.3) is Verdict.CORRECT
    assert decide_verdict(grades(0.1, 0.2), upper=0.6, lower=0.3) is Verdict.INCORRECT
    assert decide_verdict(grades(0.1, 0.4), upper=0.6, lower=0.3) is Verdict.AMBIGUOUS
    assert decide_verdict([], upper=0.6, lower=0.3) is Verdict.INCORRECT


def test_evaluator_scores_the_answering_passage_high_and_others_low() -> None:
    evaluator = LexicalEvaluator(TermStats.from_texts(CORPUS))
    question = "When was the Eiffel Tower completed?"
    scores = [evaluator.score(question, text) for text in CORPUS]
    assert scores[0] >= 0.9
    assert max(scores[1:]) < 0.2


def test_evaluator_is_absolute_when_nothing_relevant_was_retrieved() -> None:
    """Scores do not depend on the other chunks: with the gold passage missing, all stay low."""
    evaluator = LexicalEvaluator(TermStats.from_texts(CORPUS))
    question = "When was the Eiffel Tower completed?"
    assert all(evaluator.score(question, text) < 0.2 for text in CORPUS[1:])
    assert evaluator.score("", CORPUS[0]) == 0.0


def titled(text: str, title: str) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=title, text=text, metadata={"title": title}), score=1.0)


# A bridge question names one passage and describes the other: the named one answers only
# half of it, in words, yet it is the very passage the question is about.
BRIDGE = "Where is the rock band that recorded Reflektor based?"
REFLEKTOR = "Reflektor is the fourth studio album by the Canadian indie rock band Arcade Fire."
NAMESAKE = "Reflektor is a 2014 film about a lighthouse keeper and his rock band."
WORDS = TermStats.from_texts([REFLEKTOR, *CORPUS, *(f"The rock band played night {i}." for i in range(20))])


def test_a_question_naming_the_document_closes_half_the_gap_to_one() -> None:
    evaluator = LexicalEvaluator(WORDS)
    plain = evaluator.score(BRIDGE, REFLEKTOR)
    named = evaluator.score(BRIDGE, REFLEKTOR, subject="Reflektor")
    assert named == round(plain + 0.5 * (1 - plain), 4)
    assert LexicalEvaluator(WORDS, named=0.0).score(BRIDGE, REFLEKTOR, subject="Reflektor") == plain


async def test_a_title_of_common_words_or_a_namesake_qualifier_is_not_named() -> None:
    evaluator = LexicalEvaluator(WORDS)
    (common,) = evaluator.features(BRIDGE, [titled("The band toured.", "Rock band")])
    assert common[NAMES.index("named")] == 0.0
    assert not evaluator.names_document(BRIDGE, "Reflektor (film)")
    assert evaluator.names_document(BRIDGE, "Reflektor")
    (album, film) = await evaluator.grade(BRIDGE, [titled(REFLEKTOR, "Reflektor"), titled(NAMESAKE, "Reflektor (film)")])
    assert album.score > film.score


def test_a_named_document_still_scores_low_for_a_question_about_something_else() -> None:
    evaluator = LexicalEvaluator(WORDS)
    assert evaluator.score("When was the Eiffel Tower completed?", REFLEKTOR, subject="Reflektor") < 0.2


async def test_llm_grader_grades_all_chunks_concurrently() -> None:
    llm = FakeLLM(reply=lambda prompt: "8" if "Eiffel" in prompt.split("Document:")[1] else "1", latency=0.2)
    grader = LLMGrader(llm, fallback=LexicalEvaluator(TermStats.from_texts(CORPUS)), concurrency=8)
    result = await grader.grade("When was the Eiffel Tower completed?", chunks(*CORPUS))
    assert [g.score for g in result] == [0.8, 0.1, 0.1]
    assert len(llm.calls) == 3
    assert llm.peak_in_flight == 3, "the three calls wait on the model together"


async def test_llm_grader_respects_its_concurrency_bound() -> None:
    llm = FakeLLM(reply=lambda prompt: "5", latency=0.1)
    grader = LLMGrader(llm, fallback=LexicalEvaluator(TermStats.from_texts(CORPUS)), concurrency=1)
    await grader.grade("q", chunks(*CORPUS))
    assert len(llm.calls) == 3 and llm.peak_in_flight == 1


async def test_an_unparseable_llm_grade_falls_back_to_the_offline_evaluator() -> None:
    evaluator = LexicalEvaluator(TermStats.from_texts(CORPUS))
    grader = LLMGrader(FakeLLM(reply=lambda prompt: "I'd rather not say."), fallback=evaluator)
    question = "When was the Eiffel Tower completed?"
    (grade, *_) = await grader.grade(question, chunks(*CORPUS))
    assert grade.grader == "lexical"
    assert grade.score == (await evaluator.grade(question, chunks(CORPUS[0])))[0].score
    assert "LLM grade unusable" in grade.note and "rather not say" in grade.note


async def test_a_failing_llm_call_falls_back_too() -> None:
    def broken(prompt: str) -> str:
        raise ConnectionError("server went away")

    grader = LLMGrader(FakeLLM(reply=broken), fallback=LexicalEvaluator(TermStats.from_texts(CORPUS)))
    result = await grader.grade("Eiffel Tower", chunks(*CORPUS))
    assert all(g.grader == "lexical" and "ConnectionError" in g.note for g in result)


# --- the learned grade (issue 34): a fitted logistic regression over the evaluator's features


async def test_a_chunk_is_graded_by_the_shipped_weights_as_the_probability_it_answers() -> None:
    evaluator = LexicalEvaluator(TermStats.from_texts(CORPUS))
    question = "When was the Eiffel Tower completed?"
    graded = await evaluator.grade(question, chunks(*CORPUS))
    model = shipped_model()
    assert evaluator.model == model
    assert [g.score for g in graded] == [round(float(p), 4) for p in model.predict(evaluator.features(question, chunks(*CORPUS)))]
    assert graded[0].score >= model.upper > max(g.score for g in graded[1:])


async def test_a_chunk_that_leads_those_graded_with_it_grades_higher_and_nothing_relevant_stays_low() -> None:
    evaluator = LexicalEvaluator(TermStats.from_texts(CORPUS))
    question = "When was the Eiffel Tower completed?"
    alone = [(await evaluator.grade(question, chunks(text)))[0].score for text in CORPUS]
    together = [g.score for g in await evaluator.grade(question, chunks(*CORPUS))]
    assert together[0] > alone[0]  # the answering passage stands out from the other two
    assert all(t <= a for t, a in zip(together[1:], alone[1:]))  # ... and they trail it
    assert max(alone[1:]) < shipped_model().lower  # graded alone, nothing about the question: Incorrect
    margins = evaluator.features(question, chunks(*CORPUS))[:, NAMES.index("window_margin")]
    assert margins[0] > 0 > max(margins[1:]) and evaluator.features(question, chunks(CORPUS[0]))[0, -1] == 0.0


async def test_hand_set_weights_remain_for_comparison() -> None:
    evaluator = LexicalEvaluator(TermStats.from_texts(CORPUS), model="hand-set")
    question = "When was the Eiffel Tower completed?"
    graded = await evaluator.grade(question, chunks(*CORPUS))
    assert [g.score for g in graded] == [evaluator.score(question, t) for t in CORPUS]


def test_features_are_named_in_the_weights_file_with_the_figures_they_were_fitted_with() -> None:
    model = shipped_model()
    assert model.features == NAMES
    assert model.about["cross_validated"], "the file carries the cross-validated figures it was fitted with"


def test_each_grader_reads_its_scores_with_its_own_thresholds_unless_the_settings_set_them() -> None:
    stats = TermStats.from_texts(CORPUS)
    evaluator, model = LexicalEvaluator(stats), shipped_model()
    llm = LLMGrader(FakeLLM(reply=lambda prompt: "8"), fallback=evaluator)
    assert (Settings.load(env={}).grader.upper, Settings.load(env={}).grader.lower) == (None, None)
    assert thresholds_of(evaluator) == (model.upper, model.lower)  # fitted with its weights
    assert thresholds_of(LexicalEvaluator(stats, model="hand-set")) == RATING_THRESHOLDS
    assert thresholds_of(llm) == RATING_THRESHOLDS == (0.677, 0.327)  # "7/10" and up is Correct
    assert thresholds_of(CascadeGrader(evaluator, llm, band=(0.3, 0.7))) == RATING_THRESHOLDS
    assert thresholds_of(evaluator, 0.5, None) == (0.5, model.lower)  # a user's setting wins


def test_weights_for_other_features_are_refused_with_the_command_that_refits_them() -> None:
    data = shipped_model().to_dict() | {"features": ["whole"], "weights": [1.0]}
    with pytest.raises(ValueError, match="crag.evaluation.fit"):
        LogisticModel.from_dict(data)


def test_a_question_without_content_words_grades_every_chunk_zero_features() -> None:
    evaluator = LexicalEvaluator(TermStats.from_texts(CORPUS))
    assert not evaluator.features("Is it?", chunks(*CORPUS)).any()
    assert evaluator.features("anything", []).shape == (0, len(NAMES))
