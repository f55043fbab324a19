"""Graders that spend fewer model calls: a cache in front of one, a cascade, one call per batch.

- `CachedGrader` asks its grader only about chunks whose grade is not in the `GradeCache`.
- `CascadeGrader` scores every chunk offline and sends only the uncertain ones (offline score
  inside a band) to the model, as the CRAG paper has a small evaluator, not the big model, grade.
- `BatchLLMGrader` grades all k chunks in one call (a numbered list in, a JSON list of scores
  out); a reply it cannot read sends it back to chunk-by-chunk grading, and the trace says so.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms import LLM
from llama_index.core.schema import NodeWithScore

from crag._offload import off_loop, warm_up
from crag.errors import GradeParseError
from crag.events import Grade
from crag.index.grade_cache import GradeCache, grade_key
from crag.interfaces import Grader
from crag.prompts import BATCH_GRADE_PROMPT, GRADE_PROMPT
from crag.trace import note_cache_hits, note_degraded


def prompt_version(*templates: object) -> str:
    """A short hash of prompt templates' text: a changed prompt never reads an old grade."""
    text = "\x00".join(getattr(t, "template", str(t)) for t in templates)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


class CachedGrader:
    """`grader`, with the grades it gave kept in `cache` and read back instead of asked again.

    Only grades the grader itself produced are kept: a fallback's grade (its `note` says why)
    is not, so a model that failed once is asked again next time.
    """

    def __init__(self, grader: Grader, cache: GradeCache, *, model: str,
                 version: str = prompt_version(GRADE_PROMPT)) -> None:
        self.grader = grader
        self.cache = cache
        self.model = model
        self.version = version
        self.name = getattr(grader, "name", type(grader).__name__)

    def warm_up(self) -> None:
        warm_up(self.grader)

    def _key(self, query: str, chunk: NodeWithScore) -> str:
        return grade_key(grader=self.name, model=self.model, prompt_version=self.version,
                         question=query, content=chunk.node.get_content())

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        keys = [self._key(query, c) for c in chunks]
        known = await off_loop(self.cache.get_many, keys)
        missing = [c for c, k in zip(chunks, keys) if k not in known]
        fresh = iter(await self.grader.grade(query, missing) if missing else [])
        grades: list[Grade] = []
        for chunk, key in zip(chunks, keys):
            if key in known:
                grades.append(Grade(chunk_id=chunk.node.node_id, score=known[key], grader=self.name, cached=True))
            else:
                grades.append(next(fresh))
        if len(known):
            note_cache_hits(len(known))
        kept = {k: g.score for g, k in zip(grades, keys) if not g.cached and g.note is None}
        if kept:
            await off_loop(self.cache.put_many, kept)
        return grades


class CascadeGrader:
    """The offline evaluator scores every chunk; only those scoring inside `band` (low, high)
    go to `model`: below it a chunk is surely irrelevant, at or above it surely relevant."""

    name = "cascade"

    def __init__(self, offline: Grader, model: Grader, *, band: tuple[float, float]) -> None:
        low, high = band
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"cascade band must satisfy 0 <= low <= high <= 1, not {band}")
        self.offline = offline
        self.model = model
        self.band = (low, high)

    def warm_up(self) -> None:
        warm_up(self.offline, self.model)

    def uncertain(self, score: float) -> bool:
        low, high = self.band
        return low <= score and (score < high or high >= 1.0)  # a band reaching 1.0 includes it

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        first = await self.offline.grade(query, chunks)
        unsure = [i for i, g in enumerate(first) if self.uncertain(g.score)]
        if not unsure:
            return first
        second = await self.model.grade(query, [chunks[i] for i in unsure])
        grades = list(first)
        for i, grade in zip(unsure, second):
            grades[i] = grade
        return grades


_LIST = re.compile(r"\[[^\[\]]*\]", re.S)


def parse_batch_grades(reply: str, count: int) -> list[float]:
    """Read a JSON list of `count` 0-10 ratings from a reply; raise GradeParseError otherwise."""
    match = _LIST.search(reply)
    if not match:
        raise GradeParseError(f"no JSON list in batch reply {reply[:80]!r}")
    try:
        values = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        raise GradeParseError(f"batch reply is not a JSON list ({exc.msg}): {reply[:80]!r}") from None
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

    def __init__(self, llm: LLM, per_chunk: Grader, *, max_chars: int = 1500) -> None:
        self.llm = llm
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
            reply = await self.llm.achat([ChatMessage(role="user", content=prompt)])
            scores = parse_batch_grades(reply.message.content or "", len(chunks))
        except Exception as exc:  # noqa: BLE001 - any failure: grade chunk by chunk instead
            reason = str(exc) if isinstance(exc, GradeParseError) else type(exc).__name__
            note_degraded(f"batch grading unusable ({reason}); graded chunk by chunk")
            return await self.per_chunk.grade(query, chunks)
        return [Grade(chunk_id=c.node.node_id, score=s, grader=self.name) for c, s in zip(chunks, scores)]
