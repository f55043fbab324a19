"""A grader with the grades it gave kept in the grade cache and read back, not asked again."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from llama_index.core.schema import NodeWithScore

from crag._offload import off_loop, warm_up
from crag.events import Grade
from crag.index.grade_cache import AsyncGradeCache, GradeCache, grade_key
from crag.interfaces import Grader
from crag.prompts import GRADE_PROMPT
from crag.steps.grading.verdict import thresholds_of
from crag.trace import note_cache_hits


def prompt_version(*templates: object) -> str:
    """A short hash of prompt templates' text: a changed prompt never reads an old grade."""
    text = "\x00".join(getattr(t, "template", str(t)) for t in templates)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


class CachedGrader:
    """`grader`, with the grades it gave kept in `cache` and read back instead of asked again.

    Only grades the grader itself produced are kept: a fallback's grade (its `note` says why)
    is not, so a model that failed once is asked again next time. A cache with async methods
    (`AsyncGradeCache`, PostgreSQL's) is awaited; SQLite's synchronous one runs off the loop.
    """

    def __init__(self, grader: Grader, cache: GradeCache | AsyncGradeCache, *, model: str,
                 version: str = prompt_version(GRADE_PROMPT), scope: str = "") -> None:
        self.grader = grader
        self.cache = cache
        self.model = model
        self.version = version
        self.scope = scope  # whose chunks, in a cache several indexes share (`grade_scope`)
        self.name = getattr(grader, "name", type(grader).__name__)
        self.thresholds = thresholds_of(grader)  # a kept grade is read as the grader's own

    def warm_up(self) -> None:
        warm_up(self.grader)

    def _key(self, query: str, chunk: NodeWithScore) -> str:
        return grade_key(grader=self.name, model=self.model, prompt_version=self.version,
                         question=query, content=chunk.node.get_content(), scope=self.scope)

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        keys = [self._key(query, c) for c in chunks]
        known = await self._get(keys)
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
            await self._put(kept)
        return grades

    async def _get(self, keys: list[str]) -> dict[str, float]:
        if isinstance(self.cache, AsyncGradeCache):
            return await self.cache.aget_many(keys)
        return await off_loop(self.cache.get_many, keys)

    async def _put(self, scores: dict[str, float]) -> None:
        if isinstance(self.cache, AsyncGradeCache):
            await self.cache.aput_many(scores)
        else:
            await off_loop(self.cache.put_many, scores)
