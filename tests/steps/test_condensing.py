"""A follow-up made standalone before retrieval: by rules offline, by the model when there is one."""

from __future__ import annotations

import json
import re

import pytest
from support.paths import DATA

from crag import Settings, build_workflow
from crag.events import Turn
from crag.steps.condensing import LLMCondenser, RuleCondenser, Subject, key_phrase, subject
from crag.testing import FakeLLM

FIRST = "What warranty does Lumen give on the Helio H10?"
HISTORY = [Turn(role="user", content=FIRST), Turn(role="assistant", content="A 12-year warranty [1].")]


def test_the_key_phrase_is_the_longest_name() -> None:
    assert key_phrase(FIRST) == "Helio H10"
    assert key_phrase("What is a battery?") is None


@pytest.mark.parametrize(("follow_up", "standalone"), [
    ("What battery does it use?", "What battery does the Helio H10 use?"),
    ("What about its cathode?", "What about the Helio H10's cathode?"),
    ("And the battery?", "Helio H10: And the battery?"),
    ("What does the Nova X2 cost?", "What does the Nova X2 cost?"),  # names its own subject
])
async def test_rules_fill_in_the_earlier_subject(follow_up: str, standalone: str) -> None:
    assert await RuleCondenser().condense(follow_up, HISTORY) == standalone


def test_the_subject_is_the_latest_name_not_reached_by_a_pronoun() -> None:
    asked = [FIRST, "Can it be charged over USB-C?", "Is it faster than the Nova X2?"]
    assert subject(asked) == Subject("Helio H10", "the Helio H10")  # "it" still means the Helio H10
    assert subject([*asked, "What does Marie Curie say about Python 3.12?"]) == Subject("Marie Curie", "Marie Curie")
    assert subject(["Who released Python 3.12?"]).name == "Python 3.12"  # a version is one name
    assert subject(["how long is the warranty on batteries?"]) is None


async def test_the_subject_outlasts_names_met_on_the_way() -> None:
    history = [Turn(role="user", content=q) for q in ("Who founded Lumen?", "Does it sell in Japan?")]
    assert await RuleCondenser().condense("Who is its CEO?", history) == "Who is Lumen's CEO?"
    assert await RuleCondenser().condense("It has how many staff?", history) == "Lumen has how many staff?"
    beatles = [Turn(role="user", content="When did the Beatles form?")]
    assert await RuleCondenser().condense("Who was their manager?", beatles) == "Who was the Beatles' manager?"


async def test_rules_prefix_keywords_when_the_earlier_question_names_nothing() -> None:
    history = [Turn(role="user", content="how long is the warranty on batteries?")]
    assert await RuleCondenser().condense("and the price?", history) == "warranty batteries: and the price?"


async def test_the_model_condenses_with_the_conversation_in_its_prompt() -> None:
    llm = FakeLLM(reply=lambda prompt: "What battery does the Helio H10 use?\n")
    assert await LLMCondenser(llm).condense("What battery does it use?", HISTORY) == "What battery does the Helio H10 use?"
    assert FIRST in llm.calls[0] and "A 12-year warranty" in llm.calls[0]
    assert await LLMCondenser(llm).condense("Hello?", []) == "Hello?" and len(llm.calls) == 1


async def test_a_follow_up_run_records_the_standalone_question(sample_settings: Settings) -> None:
    result = await build_workflow(sample_settings).run(query="What battery does it use?", history=HISTORY)
    assert result.query == result.trace.query == "What battery does the Helio H10 use?"
    assert result.trace.asked == "What battery does it use?"
    assert "Helio" in result.answer


async def test_a_failing_model_condenser_falls_back_to_the_rules(sample_settings: Settings) -> None:
    workflow = build_workflow(sample_settings)
    workflow.condenser = LLMCondenser(FakeLLM(reply=lambda prompt: ""))
    result = await workflow.run(query="What battery does it use?", history=HISTORY)
    assert result.trace.query == "What battery does the Helio H10 use?"
    assert any("condenser failed" in d for d in result.degraded)


def _conversations() -> list[dict]:
    """tests/data/follow_ups.jsonl: conversations of five or six questions, each follow-up with
    the standalone question it stands for and the subject that question is about."""
    lines = (DATA / "follow_ups.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _words(question: str) -> list[str]:
    """A question's words without case, punctuation, articles or possessive endings."""
    plain = re.sub(r"'s?\b", "", question.lower())
    return [w for w in re.findall(r"[\w.-]+", plain) if w not in ("the", "a", "an")]


async def test_follow_ups_keep_the_conversations_subject() -> None:
    """Each follow-up is condensed from the conversation so far, answers included: it must name
    its subject and no earlier subject it has left (`right`); `as_written` counts those that
    are, word for word, the standalone question a person would write."""
    right = as_written = asked = 0
    for conversation in _conversations():
        turns = conversation["turns"]
        subjects = {t["subject"].lower() for t in turns}
        for n, turn in enumerate(turns[1:], start=1):
            history = [Turn(role=role, content=t[key]) for t in turns[:n]
                       for role, key in (("user", "user"), ("assistant", "assistant"))]
            got = (await RuleCondenser().condense(turn["user"], history)).lower()
            stale = {s for s in subjects if s in got and s not in turn["standalone"].lower()}
            right += turn["subject"].lower() in got and not stale
            as_written += _words(got) == _words(turn["standalone"])
            asked += 1
    print(f"\nfollow-ups made standalone by the rules: {right}/{asked} keep the subject, "
          f"{as_written}/{asked} as a person would write them")
    assert asked >= 50 and right >= 0.9 * asked and as_written >= 0.75 * asked
