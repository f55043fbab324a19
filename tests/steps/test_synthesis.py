"""An offline answer a person can read: short, its first sentence whole, and a table's row
quoted with its header."""

from __future__ import annotations

from crag.events import Strip
from crag.steps.synthesis import ExtractiveSynthesizer

LONG = "The Helio H10 battery uses a lithium iron phosphate cathode, " + "which lasts long " * 20 + "."
BEST = "The Helio H10 carries a ten-year warranty."
NEXT = "Lumen replaces a battery that fails within that time."
SHORT = "Lumen pays shipping."


def strip(text: str, score: float, source: str = "doc1") -> Strip:
    return Strip(text=text, source_id=source, kind="internal", score=score, doc_id=source)


async def test_an_answer_stops_at_max_chars_and_a_shorter_sentence_may_fill_it() -> None:
    strips = [strip(BEST, 0.9), strip(LONG, 0.8, "doc2"), strip(NEXT, 0.7), strip(SHORT, 0.6)]
    answer, _ = await ExtractiveSynthesizer(max_chars=120).synthesize("What warranty?", strips)
    assert answer == f"{BEST} [1] {NEXT} [1]" and len(answer) <= 120
    answer, _ = await ExtractiveSynthesizer(max_chars=None).synthesize("What warranty?", strips)
    assert LONG in answer and len(answer) > 300


async def test_the_first_sentence_is_whole_however_long_and_only_what_is_quoted_is_cited() -> None:
    strips = [strip(LONG, 0.9, "doc2"), strip(BEST, 0.8)]
    answer, sources = await ExtractiveSynthesizer(max_chars=100).synthesize("What cathode?", strips)
    assert answer == f"{LONG} [1]" and [s.id for s in sources] == ["doc2"]


async def test_the_default_answer_is_short_and_streams_as_it_is_given() -> None:
    said = "of the passage says something about the warranties on the batteries Lumen sells in many lands."
    strips = [strip(f"Sentence {n} {said}", 0.9 - n / 10) for n in range(6)]
    synthesizer = ExtractiveSynthesizer()
    answer, _ = await synthesizer.synthesize("What warranty?", strips)
    assert len(answer) <= 300 and answer.count("[1]") == 2  # max_sentences (3) would be 330
    assert "".join([piece async for piece in synthesizer.stream("What warranty?", strips)]) == answer


async def test_a_further_hops_best_sentence_is_kept_past_max_chars() -> None:
    hop = strip("Edgar Mitchell co-founded the institute in 1973.", 0.5, "doc3").model_copy(update={"hop": 1})
    strips = [strip(BEST, 0.9), strip(NEXT, 0.8), hop]
    answer, _ = await ExtractiveSynthesizer(max_chars=60).synthesize("Who co-founded it?", strips)
    assert answer == f"{BEST} [1] {hop.text} [2]"


RESTATES = "Dyrrachium fell to the Normans after a long siege by their army."
ANSWERS = "The garrison held out until February 1082, when Dyrrachium fell to the Normans."


async def test_a_sentence_that_names_a_year_answers_a_when_question_before_one_that_only_restates_it() -> None:
    strips = [strip(RESTATES, 0.82), strip(ANSWERS, 0.8, "doc2")]
    answer, sources = await ExtractiveSynthesizer(max_chars=None).synthesize(
        "When did Dyrrachium fall to the Normans?", strips)
    assert answer == f"{ANSWERS} [1] {RESTATES} [2]"
    assert [s.id for s in sources] == ["doc2", "doc1"]  # numbered in the order the answer quotes them


async def test_a_sentence_that_names_someone_new_answers_a_who_question_first() -> None:
    restates = "The ruling class of England was replaced after the invasion."
    names = "The invading Normans replaced the Anglo-Saxons as the ruling class of England."
    answer, _ = await ExtractiveSynthesizer(max_chars=None).synthesize(
        "Who was the ruling class of England before the Normans?", [strip(restates, 0.8), strip(names, 0.78)])
    assert answer.startswith(names)


async def test_the_graders_order_stands_where_its_scores_are_not_close_or_the_question_asks_no_kind() -> None:
    strips = [strip(RESTATES, 0.9), strip(ANSWERS, 0.6, "doc2")]
    answer, _ = await ExtractiveSynthesizer(max_chars=None).synthesize("When did Dyrrachium fall?", strips)
    assert answer.startswith(RESTATES)  # 0.3 apart: the grader found the first far better
    strips = [strip(RESTATES, 0.82), strip(ANSWERS, 0.8, "doc2")]
    answer, _ = await ExtractiveSynthesizer(max_chars=None).synthesize("What happened to Dyrrachium?", strips)
    assert answer.startswith(RESTATES)
