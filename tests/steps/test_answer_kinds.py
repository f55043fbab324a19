"""The kind of answer a question asks for, and whether a sentence names one."""

from __future__ import annotations

import pytest

from crag.steps.answer_kinds import asked_kind, holds_kind


@pytest.mark.parametrize(("question", "kind"), [
    ("When did Dyrrachium fall to the Normans?", "date"),
    ("In what year was the Social Charter adopted?", "date"),
    ("How many member states signed the Social Charter?", "number"),
    ("Who kicked Ethelred out?", "name"),
    ("Where was Pieter van Laer born?", "name"),
    ("In what city was Pieter van Laer born?", "name"),
    ("Turing machines are commonly employed to define what?", None),
])
def test_the_wh_word_says_what_kind_of_answer_is_asked_for(question: str, kind: str | None) -> None:
    assert asked_kind(question) == kind


def test_what_the_question_already_says_is_no_answer_to_it() -> None:
    question = "When did the Normans take Dyrrachium in the 1080s?"
    assert not holds_kind("Dyrrachium was taken by the Normans in the 1080s.", "date", question)
    assert holds_kind("Dyrrachium was taken by the Normans in February 1082.", "date", question)
    assert not holds_kind("Later the ruling class was replaced.", "name", "Who replaced the ruling class?")  # opening
    assert holds_kind("He was forced out by Sweyn Forkbeard.", "name", "Who forced Ethelred out?")
    assert holds_kind("Eleven of the twelve states signed it.", "number", "How many states signed?")
    assert not holds_kind("The states signed it.", "number", "How many states signed?")
