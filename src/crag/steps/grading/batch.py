"""One model call grades all k chunks: a numbered list in, a JSON list of ratings out."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from llama_index.core.llms import LLM
from llama_index.core.schema import NodeWithScore

from crag._offload import warm_up
from crag.errors import GradeParseError
from crag.events import Grade
from crag.interfaces import Grader
from crag.models.replies import ask
from crag.prompts import BATCH_GRADE_PROMPT
from crag.steps.grading.llm import unusable
from crag.trace import note_degraded

_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.S)


def parse_batch_grades(reply: str, count: int) -> list[float]:
    """Read a JSON list of `count` 0-10 ratings that is the whole reply (a ```json fence
    allowed); raise GradeParseError otherwise: prose around the list, a list of another
    length, anything but numbers in range."""
    text = reply.strip()
    fenced = _FENCE.fullmatch(text)
    if fenced:
        text = fenced.group(1)
    if not (text.startswith("[") and text.endswith("]")):
        raise GradeParseError(f"the batch reply is not a JSON list alone: {' '.join(reply.split())[:80]!r}")
    try:
        values = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise GradeParseError(f"batch reply is not a JSON list ({getattr(exc, 'msg', exc)}): {reply[:80]!r}") from None
    if not isinstance(values, list):
        raise GradeParseError(f"the batch reply is not a JSON list: {reply[:80]!r}")
    if len(values) != count:
        raise GradeParseError(f"batch reply rates {len(values)} documents, not {count}")
    scores: list[float] = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 10:
            raise GradeParseError(f"batch reply holds {value!r}, not a rating from 0 to 10")
        scores.append(float(value) / 10.0)
    return scores


class BatchLLMGrader:
    """Grades all chunks in one model call; an unreadable reply falls back to `per_chunk`."""

    name = "llm-batch"

    def __init__(self, llm: LLM, per_chunk: Grader, *, max_chars: int = 1500, max_tokens: int | None = 128) -> None:
        self.llm = llm
        self.max_tokens = max_tokens
        self.per_chunk = per_chunk
        self.max_chars = max_chars

    def warm_up(self) -> None:
        warm_up(self.per_chunk)

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        if not chunks:
            return []
        documents = "\n\n".join(
            f"[{n}] {c.node.get_content()[: self.max_chars]}" for n, c in enumerate(chunks, 1)
        )
        prompt = BATCH_GRADE_PROMPT.format(query=query, count=len(chunks), documents=documents)
        try:
            reply = await ask(self.llm, prompt, max_tokens=self.max_tokens, purpose="batch grade")
            scores = parse_batch_grades(reply, len(chunks))
        except Exception as exc:  # noqa: BLE001 - any failure: grade chunk by chunk instead
            reason = unusable(exc)
            note_degraded(f"batch grading unusable ({reason}); graded chunk by chunk")
            return await self.per_chunk.grade(query, chunks)
        return [Grade(chunk_id=c.node.node_id, score=s, grader=self.name) for c, s in zip(chunks, scores)]
