"""Retrieve → postprocess → grade → verdict, written once.

Every caller that asks "what do the documents hold on this, and is it enough?" goes through
`GradedRetrieval`: the corrective workflow's `retrieve`, `postprocess` and `grade` steps, its
hops, plain RAG (which stops before grading), MCP's `search` and `crag calibrate`. So the
chunks calibration fits thresholds on are the chunks a run grades, postprocessing included,
and a hop is graded by the same rule as the question.

    retrieval = GradedRetrieval(retriever, grader, postprocessors, upper=0.6, lower=0.3)
    graded = await retrieval.graded("How long is the warranty?")
    graded.verdict, graded.kept  # Verdict.CORRECT, the chunks scoring at least `lower`

Inside a run, the run's budget and deadline bound the grader's model calls (they are read
from the running context, `crag.budget`), and a cached grader reads its grades back; outside
one, `alone` opens a budget and a time limit of its own, as a run would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from llama_index.core.schema import NodeWithScore

from crag._offload import off_loop
from crag.budget import Budget, spending
from crag.errors import ConfigError
from crag.events import Grade, Verdict
from crag.interfaces import CoverageJudge, Grader, Postprocessor, Retriever
from crag.steps.grading import context_of, decide_verdict, thresholds_of
from crag.steps.grading.rerank import reranker_order
from crag.steps.postprocessing import apply_postprocessors

__all__ = ["Graded", "GradedRetrieval"]

@dataclass(frozen=True)
class Graded:
    """Chunks, a grade for each (in the same order), and the verdict they make together.

    `kept` are the chunks at or above the lower threshold: what refinement reads, in the
    reranker's order where a reranker graded them (`grading.rerank.reranker_order`).
    `coverage` is the kept chunks' judged share of the question, when it was judged.
    """

    chunks: list[NodeWithScore]
    grades: list[Grade]
    verdict: Verdict
    kept: list[NodeWithScore]
    coverage: float | None = None

    @property
    def fallback_note(self) -> str | None:
        """'n of m grades by a fallback (why)', when a grader's fallback gave any grade."""
        fallbacks = [g for g in self.grades if g.note]
        if not fallbacks:
            return None
        return f"{len(fallbacks)} of {len(self.grades)} grades by a fallback ({fallbacks[0].note})"


class GradedRetrieval:
    """Turns a query into chunks, grades and a verdict, as the CRAG paper's evaluator does.

    Args:
        retriever: finds candidate chunks.
        grader: scores each chunk's relevance in [0, 1]; None for a retrieval that is only
            ever `find`-ed (plain RAG trusts what it finds).
        postprocessors: stages run in order on the candidates before grading (none: as found).
        upper: some chunk scoring at least this makes the verdict Correct.
        lower: every chunk below this makes it Incorrect; in between, Ambiguous. Either left
            unset is the grader's own (`grading.thresholds_of`).
        judge: scores how much of the question the kept chunks cover together; used when a
            caller grades the whole question (`whole=True`), and only when a chunk reaches
            `upper` (below it the judgment would decide nothing). None skips it.
        cover: the share of the question the kept chunks must cover for Correct.

    Raises:
        ConfigError: `lower` above `upper`; `grade` without a grader.
    """

    def __init__(
        self,
        retriever: Retriever,
        grader: Grader | None = None,
        postprocessors: Sequence[Postprocessor] = (),
        *,
        upper: float | None = None,
        lower: float | None = None,
        judge: CoverageJudge | None = None,
        cover: float = 0.0,
    ) -> None:
        given = (upper, lower)
        upper, lower = thresholds_of(grader, upper, lower)
        if lower > upper:
            whose = " (the grader's own)" if None in given else ""
            raise ConfigError(f"lower threshold ({lower}) must not exceed upper ({upper}){whose}")
        self.retriever = retriever
        self.grader = grader
        self.postprocessors = list(postprocessors)
        self.upper = upper
        self.lower = lower
        self.judge = judge
        self.cover = cover

    async def retrieve(self, query: str) -> list[NodeWithScore]:
        """The retriever's candidates, as found."""
        return await self.retriever.retrieve(query)

    async def postprocess(self, query: str, chunks: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        """The postprocessing stages run on `chunks`, in order."""
        return await apply_postprocessors(self.postprocessors, query, chunks)

    async def find(self, query: str) -> list[NodeWithScore]:
        """Candidates, postprocessed: what would be graded (plain RAG answers from these)."""
        return await self.postprocess(query, await self.retrieve(query))

    async def grade(
        self, against: str, chunks: Sequence[NodeWithScore], *, whole: bool = False
    ) -> Graded:
        """Grade `chunks` against `against` and decide the verdict.

        `whole`: `against` is the user's whole question, so the kept chunks' coverage of it is
        judged too (when a `judge` is set); a hop's sub-question is not.
        """
        if self.grader is None:
            raise ConfigError("this retrieval has no grader: give one to grade what it finds")
        chunks = list(chunks)
        grades = list(await self.grader.grade(against, chunks))
        # Where a reranker graded, its order is the kept chunks' (refining and the answer keep it).
        kept = [chunks[i] for i in reranker_order(grades) if grades[i].score >= self.lower]
        coverage = None
        if whole and self.judge is not None and any(g.score >= self.upper for g in grades):
            pairs = [(c.node.get_content(), context_of(c.node.metadata)) for c in kept]
            coverage = await off_loop(self.judge.coverage, against, pairs)
        verdict = decide_verdict(grades, self.upper, self.lower, coverage=coverage, cover=self.cover)
        return Graded(chunks=chunks, grades=grades, verdict=verdict, kept=kept, coverage=coverage)

    async def graded(self, query: str, *, whole: bool = False) -> Graded:
        """`query`'s chunks, found (`find`) and graded against it (`grade`)."""
        return await self.grade(query, await self.find(query), whole=whole)

    async def alone(self, query: str, *, budget: Budget, timeout: float) -> Graded:
        """`query` graded whole outside a run (MCP's `search`): its model calls under `budget`,
        the deadline included, and the whole ended after `timeout` seconds, as a run's are."""
        with spending(budget):
            return await asyncio.wait_for(self.graded(query, whole=True), timeout)
