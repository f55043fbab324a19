"""Query condensers: a follow-up in a conversation -> a question that stands on its own.

    earlier: "What warranty does Lumen give on the Helio H10?"
    follow-up: "What battery does it use?"  ->  "What battery does the Helio H10 use?"

Retrieval reads only the question, so a follow-up's "it" would find nothing; the condenser
runs before retrieval, by the model when one is configured, else by `RuleCondenser`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from llama_index.core.llms import LLM, ChatMessage

from crag.events import Turn
from crag.prompts import CONDENSE_PROMPT
from crag.steps.rewriting import KeywordRewriter

# A pronoun standing for the earlier question's subject; the possessive ones take "'s".
# Not "this" or "that": "how long is that?" after a warranty question means the warranty.
_PRONOUN = re.compile(r"\b(it|its|they|them|their|he|she|him|her|his)\b", re.IGNORECASE)
_POSSESSIVE = frozenset({"its", "their", "his", "her"})
# A name: capitalised or numbered words in a row ("Helio H10", "Lumen"), not the first word.
_NAME = re.compile(r"(?<!^)(?<![.?!]\s)\b(?:[A-Z][\w-]*|\w*\d\w*)(?:\s+(?:[A-Z][\w-]*|\w*\d\w*))*")
_QUESTION_WORD = frozenset({"what", "which", "who", "whom", "whose", "when", "where", "why", "how", "is",
                            "are", "does", "do", "can", "and", "but", "or", "so", "tell", "i"})
_TURNS_SHOWN = 6  # the model sees the last few turns: older ones rarely hold what "it" means


def key_phrase(question: str) -> str | None:
    """The name a question is about: its longest run of capitalised or numbered words
    ("Helio H10" in "What warranty does Lumen give on the Helio H10?"); None if it names none."""
    names = [m.group(0) for m in _NAME.finditer(question) if m.group(0).lower() not in _QUESTION_WORD]
    return max(names, key=len, default=None)


class RuleCondenser:
    """Offline: a pronoun becomes the earlier question's name ("it" -> "the Helio H10"); a
    follow-up with neither a pronoun nor a name of its own ("And the battery?") is prefixed
    with the earlier question's name, or its keywords when it names nothing."""

    def __init__(self) -> None:
        self.keywords = KeywordRewriter()

    async def condense(self, query: str, history: Sequence[Turn]) -> str:
        earlier = [t.content for t in history if t.role == "user" and t.content.strip()]
        if not earlier:
            return query
        name = next((p for q in reversed(earlier) if (p := key_phrase(q))), None)
        if name is not None and _PRONOUN.search(query):
            subject = name if name.lower().startswith("the ") else f"the {name}"
            # Only the first pronoun: a second usually means something else ("does it have that").
            return _PRONOUN.sub(lambda m: _replace(m.group(0), subject), query, count=1)
        if key_phrase(query) is not None:
            return query  # it names its own subject
        prefix = name or await self.keywords.rewrite(earlier[-1])
        return f"{prefix}: {query}"


def _replace(pronoun: str, subject: str) -> str:
    return f"{subject}'s" if pronoun.lower() in _POSSESSIVE else subject


class LLMCondenser:
    """Asks a chat model for the standalone question; a question with no earlier user turn
    is returned as it is, without a call."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm

    async def condense(self, query: str, history: Sequence[Turn]) -> str:
        if not any(t.role == "user" for t in history):
            return query
        conversation = "\n".join(f"{t.role}: {' '.join(t.content.split())}" for t in history[-_TURNS_SHOWN:])
        prompt = CONDENSE_PROMPT.format(conversation=conversation, query=query)
        reply = await self.llm.achat([ChatMessage(role="user", content=prompt)])
        lines = [ln.strip().strip("\"'`") for ln in (reply.message.content or "").splitlines()]
        standalone = next((ln for ln in lines if ln), "")
        if not standalone:
            raise ValueError("the model returned no question")
        return standalone
