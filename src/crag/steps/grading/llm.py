"""A chat model grades each chunk: the prompt, reading its rating, falling back when it fails."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from llama_index.core.llms import LLM, ChatMessage
from llama_index.core.schema import NodeWithScore

from crag._offload import warm_up
from crag.errors import GradeParseError
from crag.events import Grade
from crag.interfaces import Grader
from crag.prompts import GRADE_PROMPT

_NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)(?:\s*/\s*10)?(?!\.?\d)")


def parse_grade(reply: str) -> float:
    """Read a 0-10 rating (or yes/no) from a model's reply; raise GradeParseError otherwise.

    A decimal strictly between 0 and 1 ("0.8") is read as the probability the model
    meant, not as 0.08 on the prompt's scale.
    """
    text = reply.strip().lower()
    match = _NUMBER.search(text)
    if match:
        number = match.group(1)
        value = float(number)
        if "." in number and 0.0 < value < 1.0 and "/" not in match.group(0):
            return value
        if 0.0 <= value <= 10.0:
            return value / 10.0
        raise GradeParseError(f"grade {number} is outside 0-10 in reply {reply[:80]!r}")
    first = re.findall(r"[a-z]+", text)[:3]
    if "yes" in first or "relevant" in first[:1]:
        return 1.0
    if "no" in first or "irrelevant" in first[:1]:
        return 0.0
    raise GradeParseError(f"no 0-10 rating or yes/no in reply {reply[:80]!r}")


class LLMGrader:
    """Grades every chunk with a chat model, all chunks concurrently (bounded).

    An unparseable reply or a failed call falls back to `fallback` for that chunk,
    and the grade's `note` says so.
    """

    name = "llm"

    def __init__(self, llm: LLM, fallback: Grader, *, concurrency: int = 32, max_chars: int = 4000) -> None:
        self.llm = llm
        self.fallback = fallback
        self.concurrency = concurrency
        self.max_chars = max_chars

    def warm_up(self) -> None:
        """Load the fallback's models (the chat model connects on its first call)."""
        warm_up(self.fallback)

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        limit = asyncio.Semaphore(self.concurrency)

        async def one(chunk: NodeWithScore) -> Grade:
            prompt = GRADE_PROMPT.format(query=query, document=chunk.node.get_content()[: self.max_chars])
            try:
                async with limit:
                    reply = await self.llm.achat([ChatMessage(role="user", content=prompt)])
                score = parse_grade(reply.message.content or "")
                return Grade(chunk_id=chunk.node.node_id, score=score, grader=self.name)
            except Exception as exc:  # noqa: BLE001 - any model failure degrades to the fallback
                (fallback,) = await self.fallback.grade(query, [chunk])
                reason = str(exc) if isinstance(exc, GradeParseError) else type(exc).__name__
                return fallback.model_copy(update={"note": f"LLM grade unusable ({reason}); used {fallback.grader}"})

        return list(await asyncio.gather(*(one(c) for c in chunks)))
