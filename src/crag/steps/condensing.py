"""Query condensers: a follow-up in a conversation -> a question that stands on its own.

    earlier: "What warranty does Lumen give on the Helio H10?"
    follow-up: "What battery does it use?"  ->  "What battery does the Helio H10 use?"

Retrieval reads only the question, so a follow-up's "it" would find nothing; the condenser
runs before retrieval, by the model when one is configured, else by `RuleCondenser`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from llama_index.core.llms import LLM

from crag.events import Turn
from crag.interfaces import QueryCondenser
from crag.models.replies import ask
from crag.prompts import CONDENSE_PROMPT
from crag.steps.query_checks import check_generated, instructions_of
from crag.steps.rewriting import KeywordRewriter, first_line
from crag.trace import StepRecord, or_fallback

# A pronoun standing for the conversation's subject; the possessive ones take "'s".
# Not "this" or "that": "how long is that?" after a warranty question means the warranty.
_PRONOUN = re.compile(r"\b(it|its|they|them|their|he|she|him|her|his)\b", re.IGNORECASE)
_POSSESSIVE = frozenset({"its", "their", "his", "her"})
# A name: capitalised or numbered words in a row ("Helio H10", "Lumen", "Python 3.12"), not the
# first word; a number may hold dots inside it (a version), not at its end (a full stop).
_WORD = r"(?:[A-Z][\w-]*|\w*\d(?:[\w.]*\w)?)"
_NAME = re.compile(rf"(?<!^)(?<![.?!]\s)\b{_WORD}(?:\s+{_WORD})*")
_QUESTION_WORD = frozenset({"what", "which", "who", "whom", "whose", "when", "where", "why", "how", "is",
                            "are", "does", "do", "can", "and", "but", "or", "so", "tell", "i"})
_TURNS_SHOWN = 6  # the model sees the last few turns: older ones rarely hold what "it" means


def key_phrase(question: str) -> str | None:
    """The name a question is about: its longest run of capitalised or numbered words
    ("Helio H10" in "What warranty does Lumen give on the Helio H10?"); None if it names none."""
    names = [m.group(0) for m in _NAME.finditer(question) if m.group(0).lower() not in _QUESTION_WORD]
    return max(names, key=len, default=None)


@dataclass(frozen=True)
class Subject:
    """What a conversation is about: its `name`, and that name `written` as the question wrote
    it, with its "the" if it had one ("the Helio H10", but "Marie Curie")."""

    name: str
    written: str


def subject(questions: Sequence[str]) -> Subject | None:
    """The subject of a conversation's questions, in order: the name in the latest one that named
    one of its own. A question that refers back with a pronoun keeps the subject it refers to,
    whatever else it names ("Does it support USB-C?" is still about the Helio H10), and so does
    one that names nothing ("And the battery?"); None if no question named anything."""
    found = None
    for question in questions:
        name = key_phrase(question)
        if name is not None and (found is None or not _PRONOUN.search(question)):
            article = re.search(rf"\bthe\s+{re.escape(name)}", question, re.IGNORECASE)
            found = Subject(name, f"the {name}" if article and not name.lower().startswith("the ") else name)
    return found


class RuleCondenser:
    """Offline: the first pronoun becomes the conversation's `subject` as it was written ("it"
    -> "the Helio H10", "she" -> "Marie Curie"); a follow-up with neither a pronoun nor a name of
    its own ("And the battery?") is prefixed with the subject's name, or with the opening
    question's keywords when no question named anything.

    The subject is carried across the whole conversation, not read from the question just
    before: in tests/data/follow_ups.jsonl (13 conversations, 59 follow-ups), taking the name
    in the latest question that named anything kept the subject in 31 follow-ups (28 word for
    word as a person would write them); this keeps it in 57 (49 word for word), by
    `tests/steps/test_condensing.py::test_follow_ups_keep_the_conversations_subject`. The two it
    misses follow "Do you need a permit from Nepal?" (about Everest): a name with no pronoun
    reads as a new subject.
    """

    def __init__(self) -> None:
        self.keywords = KeywordRewriter()

    async def condense(self, query: str, history: Sequence[Turn]) -> str:
        earlier = [t.content for t in history if t.role == "user" and t.content.strip()]
        if not earlier:
            return query
        about = subject(earlier)
        if about is not None and _PRONOUN.search(query):
            # Only the first pronoun: a second usually means something else ("does it have that").
            return _PRONOUN.sub(lambda m: _replace(m.group(0), about.written), query, count=1)
        if key_phrase(query) is not None:
            return query  # it names its own subject
        # The opening question's keywords: a later one without a name was taken as a follow-up.
        prefix = about.name if about else await self.keywords.rewrite(earlier[0])
        return f"{prefix}: {query}"


def _replace(pronoun: str, subject: str) -> str:
    if pronoun[0].isupper():  # the question's first word
        subject = subject[0].upper() + subject[1:]
    if pronoun.lower() not in _POSSESSIVE:
        return subject
    return f"{subject}'" if subject.endswith("s") else f"{subject}'s"  # "the Beatles' manager"


class LLMCondenser:
    """Asks a chat model for the standalone question, at most `max_tokens` long; a question
    with no earlier user turn is returned as it is, without a call.

    A reply that is no usable question (empty, cut at the limit, a copy of a previous answer,
    far longer than the conversation's questions, about something else:
    `crag.steps.query_checks`) raises, and the workflow's rules stand in, saying why.
    """

    def __init__(self, llm: LLM, *, max_tokens: int | None = 96) -> None:
        self.llm = llm
        self.max_tokens = max_tokens

    async def condense(self, query: str, history: Sequence[Turn]) -> str:
        if not any(t.role == "user" for t in history):
            return query
        shown = history[-_TURNS_SHOWN:]
        conversation = "\n".join(f"{t.role}: {' '.join(t.content.split())}" for t in shown)
        prompt = CONDENSE_PROMPT.format(conversation=conversation, query=query)
        reply = await ask(self.llm, prompt, max_tokens=self.max_tokens, purpose="follow-up", stop=["\n\n"])
        return check_generated(
            first_line(reply), question=query,
            context=[t.content for t in shown if t.role == "user"],
            answers=[t.content for t in shown if t.role == "assistant"],
            instructions=instructions_of(CONDENSE_PROMPT.template), what="follow-up",
        )


async def standalone(
    condenser: QueryCondenser, query: str, history: Sequence[Turn], record: StepRecord
) -> str:
    """The follow-up `query` made standalone by `condenser`, or by the rules when it fails (the
    step's `record` says so)."""
    return await or_fallback(
        record, "condenser", "used the rules",
        lambda: condenser.condense(query, history), lambda: RuleCondenser().condense(query, history),
    )
