"""A chat model grades each chunk: the prompt, reading its rating, falling back when it fails."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from llama_index.core.llms import LLM
from llama_index.core.schema import NodeWithScore

from crag._offload import warm_up
from crag.errors import CragError, GradeParseError
from crag.events import Grade
from crag.interfaces import Grader
from crag.models.replies import ask
from crag.prompts import GRADE_PROMPT

# The whole reply, as the prompt asks for it: a number, perhaps with a label before it and
# "/10" after it ("8", "Score: 8/10", "**7**"), or a JSON object holding one. Prose around the
# number, an echo of the prompt or several numbers are not a grade: "The document is irrelevant
# to 10." once became 1.0 when the first number anywhere was read (issue 31).
_GRADE = re.compile(
    r"(?:(?:score|rating|grade|relevance)\s*[:=]?\s*)?"
    r"(?P<number>-?\d+(?:\.\d+)?)(?P<scale>\s*(?:/|out\s+of)\s*10)?\.?"
)
_WORD = re.compile(r"(?:yes|no|relevant|irrelevant|not\s+relevant)\.?")
_JSON_GRADE = re.compile(r"\{\s*\"(?:score|rating|grade|relevance)\"\s*:\s*(?P<number>-?\d+(?:\.\d+)?)\s*\}")


def parse_grade(reply: str) -> float:
    """Read a 0-10 rating (or yes/no) that is the whole reply; raise GradeParseError otherwise.

    Accepted: "7", "10", "7/10", "Score: 8", "**8**", `{"score": 8}`, "yes", "No.", "Relevant".
    Refused: prose around a number, several numbers, a number outside 0-10, an empty reply.
    A decimal strictly between 0 and 1 ("0.8") is read as the probability the model meant,
    not as 0.08 on the prompt's scale.
    """
    text = reply.strip().strip("*_`\"' ").strip().lower()
    match = _GRADE.fullmatch(text) or _JSON_GRADE.fullmatch(text)
    if match:
        number = match.group("number")
        value = float(number)
        on_scale = "scale" in match.groupdict() and match.group("scale")
        if "." in number and 0.0 < value < 1.0 and not on_scale:
            return value
        if 0.0 <= value <= 10.0:
            return value / 10.0
        raise GradeParseError(f"grade {number} is outside 0-10 in reply {reply[:80]!r}")
    if _WORD.fullmatch(text):
        return 1.0 if text.rstrip(".") in ("yes", "relevant") else 0.0
    raise GradeParseError(f"the reply is not a 0-10 rating alone: {' '.join(reply.split())[:80]!r}")


class LLMGrader:
    """Grades every chunk with a chat model, all chunks concurrently (bounded).

    An unparseable reply, one cut at `max_tokens`, or a failed call falls back to `fallback`
    for that chunk, and the grade's `note` says why.
    """

    name = "llm"

    def __init__(
        self, llm: LLM, fallback: Grader, *, concurrency: int = 32, max_chars: int = 4000,
        max_tokens: int | None = 8,
    ) -> None:
        self.llm = llm
        self.max_tokens = max_tokens
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
                    # A blank line ends a grade: what follows it is an explanation nobody reads.
                    reply = await ask(self.llm, prompt, max_tokens=self.max_tokens, purpose="grade", stop=["\n\n"])
                score = parse_grade(reply)
                return Grade(chunk_id=chunk.node.node_id, score=score, grader=self.name)
            except Exception as exc:  # noqa: BLE001 - any model failure degrades to the fallback
                (fallback,) = await self.fallback.grade(query, [chunk])
                reason = unusable(exc)
                return fallback.model_copy(update={"note": f"LLM grade unusable ({reason}); used {fallback.grader}"})

        return list(await asyncio.gather(*(one(c) for c in chunks)))


def unusable(exc: BaseException) -> str:
    """Why a model's reply was not used, for a grade's note: crag's own errors say it in words
    (a parse failure, the length limit, the run's deadline); others by their type."""
    return f"{type(exc).__name__}: {exc}" if isinstance(exc, CragError) else type(exc).__name__
