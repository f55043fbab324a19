"""Evaluation measures on hand-made cases: answer matching, classifier quality, verdicts."""

from __future__ import annotations

import pytest

from crag.evaluation.metrics import (
    answer_sentences,
    best_sentence_f1,
    binary_report,
    contains_answer,
    first_sentence_contains_answer,
    normalize_answer,
    percentile,
    rate,
    roc_auc,
    token_f1,
    verdict_agreement,
)

# The shape of an extractive answer: three cited sentences, the markers between them.
CITED = (
    "Lucy Saunders (born 1957) is an American writer. [1] "
    "She wrote about beer and food. [1] "
    "The British author Michael Jackson wrote about whisky. [2]"
)


@pytest.mark.parametrize(
    "text, normalised",
    [
        ("The Eiffel Tower", "eiffel tower"),  # case and articles
        ("  a   cat,  an owl; the end. ", "cat owl end"),  # punctuation and spacing
        ("Zhenjin's son", "zhenjin s son"),  # punctuation becomes a space, not nothing
        ("“Scramble for Africa” — 1880s", "scramble for africa 1880s"),  # Unicode punctuation
        ("ＦＵＬＬ width", "full width"),  # NFKC
        ("Theatre anthem", "theatre anthem"),  # 'the' inside a word stays
    ],
)
def test_answers_are_normalised_as_in_squad(text: str, normalised: str) -> None:
    assert normalize_answer(text) == normalised


def test_an_answer_matches_when_a_gold_string_occurs_on_word_boundaries() -> None:
    answer = "Kublai named his eldest son, Zhenjin, as the Crown Prince in 1273. [1]"
    assert contains_answer(answer, ["Zhenjin"])
    assert contains_answer(answer, ["his eldest son, Zhenjin"])  # punctuation ignored
    assert contains_answer(answer, ["nobody", "the crown prince"])  # any of the golds
    assert not contains_answer(answer, ["k"])  # a letter inside "Kublai" is no match
    assert not contains_answer(answer, ["127"])  # nor a prefix of a number
    assert not contains_answer(answer, ["Zhenjin Khan"])
    assert not contains_answer(answer, ["the", ""])  # golds that normalise to nothing never match


def test_citation_markers_are_not_part_of_any_sentence() -> None:
    assert answer_sentences(CITED) == [
        "Lucy Saunders (born 1957) is an American writer.",
        "She wrote about beer and food.",
        "The British author Michael Jackson wrote about whisky.",
    ]
    assert answer_sentences("In 1273 [1, 2]. Then more [3-4].") == ["In 1273 .", "Then more ."]
    assert answer_sentences("[1] [2]") == [] and answer_sentences("") == []
    assert answer_sentences("See list [a] here.") == ["See list [a] here."]  # not a marker


def test_only_the_first_sentence_counts_for_the_first_sentence_score() -> None:
    assert first_sentence_contains_answer(CITED, ["1957"])
    assert contains_answer(CITED, ["Michael Jackson"])  # the headline score counts it
    assert not first_sentence_contains_answer(CITED, ["Michael Jackson"])  # this one does not
    assert not first_sentence_contains_answer("[1]", ["1"])  # a marker is no sentence
    assert not first_sentence_contains_answer("", ["anything"])


@pytest.mark.parametrize(
    "prediction, gold, f1",
    [
        ("Michael Jackson", "michael jackson", 1.0),  # normalised first
        ("the writer Michael Jackson", "Michael Jackson", 2 * (2 / 3) * 1 / (2 / 3 + 1)),
        ("Jackson", "Michael Jackson", 2 * 1 * 0.5 / 1.5),  # precision 1, recall 1/2
        ("Paris", "London", 0.0),
        ("New York New York", "New York", 2 * 0.5 * 1 / 1.5),  # bags: 'new' counts twice at most
        ("the", "a", 1.0),  # both empty once normalised, as SQuAD scores them
        ("the", "Paris", 0.0),
    ],
)
def test_token_f1_is_squads(prediction: str, gold: str, f1: float) -> None:
    assert token_f1(prediction, gold) == pytest.approx(f1)


def test_best_sentence_f1_takes_the_best_sentence_and_the_best_gold() -> None:
    answer = "He was born in Paris. [1] Jackson. [2]"
    # "Jackson." against "Michael Jackson": precision 1, recall 1/2
    assert best_sentence_f1(answer, ["Michael Jackson"]) == pytest.approx(2 / 3)
    assert best_sentence_f1(answer, ["Michael Jackson", "Jackson"]) == pytest.approx(1.0)
    # "He was born in Paris." against "Paris": 1 of 5 tokens
    assert best_sentence_f1(answer, ["Paris"]) == pytest.approx(2 * 0.2 * 1 / 1.2)
    assert best_sentence_f1(answer, []) == 0.0 and best_sentence_f1("", ["Paris"]) == 0.0


def test_roc_auc_counts_pairs_and_ties_half() -> None:
    assert roc_auc([True, False], [0.9, 0.1]) == 1.0
    assert roc_auc([True, False], [0.1, 0.9]) == 0.0
    assert roc_auc([True, False], [0.5, 0.5]) == 0.5
    # positives 0.8, 0.4; negatives 0.6, 0.4, 0.2: pairs won 1 + 1 + 1 + 0.5 (tie) of 6
    assert roc_auc([True, True, False, False, False], [0.8, 0.4, 0.6, 0.4, 0.2]) == pytest.approx(
        4.5 / 6
    )


def test_roc_auc_is_undefined_with_one_class() -> None:
    assert roc_auc([False, False], [0.2, 0.3]) is None
    assert roc_auc([True], [0.2]) is None


def test_binary_report_on_a_hand_counted_confusion_matrix() -> None:
    labels = [True, True, True, False, False, False, False, False, False, False]
    scores = [0.9, 0.7, 0.2, 0.8, 0.3, 0.3, 0.1, 0.1, 0.0, 0.0]
    report = binary_report(labels, scores, threshold=0.5)
    # predicted relevant: 0.9, 0.7 (true positives), 0.8 (false positive)
    assert (report.n, report.positives) == (10, 3)
    assert report.accuracy == pytest.approx(8 / 10)
    assert report.precision == pytest.approx(2 / 3)
    assert report.recall == pytest.approx(2 / 3)
    assert report.specificity == pytest.approx(6 / 7)
    assert report.balanced_accuracy == pytest.approx((2 / 3 + 6 / 7) / 2)
    assert report.majority_accuracy == pytest.approx(7 / 10)


def test_a_constant_answer_has_high_accuracy_but_balanced_accuracy_one_half() -> None:
    labels = [True] + [False] * 9
    report = binary_report(labels, [0.0] * 10, threshold=0.5)  # always "irrelevant"
    assert report.accuracy == pytest.approx(0.9)
    assert report.balanced_accuracy == pytest.approx(0.5)
    assert report.precision is None  # nothing predicted relevant


def test_verdicts_agree_with_retrieval_when_correct_means_retrieved() -> None:
    agreement = verdict_agreement(
        ["correct", "ambiguous", "incorrect", "correct", "incorrect", "ambiguous"],
        [True, True, True, False, False, False],
        [0.9, 0.5, 0.2, 0.7, 0.1, 0.4],
    )
    assert agreement.gold_retrieved == {"correct": 1, "ambiguous": 1, "incorrect": 1}
    assert agreement.gold_not_retrieved == {"correct": 1, "ambiguous": 1, "incorrect": 1}
    assert agreement.accuracy == pytest.approx(2 / 6)  # ambiguous counts as neither
    assert agreement.decisive_accuracy == pytest.approx(2 / 4)
    assert agreement.unsafe_correct == pytest.approx(1 / 3)
    assert agreement.roc_auc == pytest.approx(6 / 9)  # 0.9 beats 3, 0.5 beats 2, 0.2 beats 1


def test_rates_and_percentiles_skip_unknowns_and_handle_nothing() -> None:
    assert rate([True, False, None, True]) == pytest.approx(2 / 3)
    assert rate([None]) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([], 95) is None
