"""A follow-up made standalone before retrieval: by rules offline, by the model when there is one."""

from __future__ import annotations

import pytest

from crag import Settings, build_workflow
from crag.events import Turn
from crag.steps.condensing import LLMCondenser, RuleCondenser, key_phrase
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
