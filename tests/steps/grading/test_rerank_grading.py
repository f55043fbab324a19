"""A reranker grades: one request per question, grades in chunk order, the lexical evaluator
(noted) when the reranker cannot, the cascade's undecided band only, and its order kept."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from crag.budget import Budget, spending
from crag.errors import RerankError
from crag.events import Grade, Verdict
from crag.index.grade_cache import GradeCache
from crag.steps.graded_retrieval import Graded, GradedRetrieval
from crag.steps.grading import CachedGrader, CascadeGrader, RerankGrader, thresholds_of
from crag.steps.grading.rerank import RERANK_THRESHOLDS, reranker_order


class FakeReranker:
    """Scores each document by a table (else 0.0), counting the calls and what each sent."""

    def __init__(self, scores: dict[str, float] | None = None, *, fails: BaseException | None = None,
                 answer: list[float] | None = None, hangs: bool = False) -> None:
        self.scores = scores or {}
        self.fails = fails
        self.answer = answer
        self.hangs = hangs
        self.calls: list[list[str]] = []

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        self.calls.append(list(documents))
        if self.hangs:
            await asyncio.Event().wait()
        if self.fails is not None:
            raise self.fails
        if self.answer is not None:
            return self.answer
        return [self.scores.get(d, 0.0) for d in documents]


class TableGrader:
    """A stand-in lexical evaluator: a fixed score per chunk text."""

    name = "lexical"

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores
        self.seen: list[list[str]] = []

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        self.seen.append([c.node.get_content() for c in chunks])
        return [Grade(chunk_id=c.node.node_id, score=self.scores.get(c.node.get_content(), 0.0), grader=self.name)
                for c in chunks]


def chunks(*texts: str) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=t, id_=f"c{i}"), score=1.0) for i, t in enumerate(texts)]


TEXTS = ("the warranty lasts twelve years", "batteries are heavy", "install it on a wall")
LEXICAL = {TEXTS[0]: 0.8, TEXTS[1]: 0.4, TEXTS[2]: 0.1}


async def test_all_chunks_are_graded_in_one_request_in_chunk_order() -> None:
    reranker = FakeReranker({TEXTS[0]: 0.2, TEXTS[1]: 0.95, TEXTS[2]: 0.01})
    grades = await RerankGrader(reranker, TableGrader(LEXICAL)).grade("q", chunks(*TEXTS))

    assert len(reranker.calls) == 1 and reranker.calls[0] == list(TEXTS)
    assert [(g.chunk_id, g.score, g.grader, g.note) for g in grades] == [
        ("c0", 0.2, "rerank", None), ("c1", 0.95, "rerank", None), ("c2", 0.01, "rerank", None)]


async def test_no_chunks_make_no_request() -> None:
    reranker = FakeReranker()
    assert await RerankGrader(reranker, TableGrader(LEXICAL)).grade("q", []) == []
    assert reranker.calls == []


async def test_each_chunk_is_sent_cut_to_max_chars() -> None:
    reranker = FakeReranker()
    await RerankGrader(reranker, TableGrader({}), max_chars=5).grade("q", chunks("abcdefgh"))
    assert reranker.calls == [["abcde"]]


@pytest.mark.parametrize("reranker", [
    FakeReranker(fails=RerankError("the server answered 503")),
    FakeReranker(fails=ConnectionRefusedError()),
    FakeReranker(answer=[0.5, math.nan, 0.1]),  # a reranker of the user's own that breaks the promise
    FakeReranker(answer=[0.5, 0.1]),
    FakeReranker(answer=[0.5, 3.2, 0.1]),
], ids=["RerankError", "refused", "NaN", "missing", "outside"])
async def test_a_reranker_that_cannot_score_leaves_every_grade_to_the_lexical_evaluator_and_says_why(
    reranker: FakeReranker,
) -> None:
    grades = await RerankGrader(reranker, TableGrader(LEXICAL)).grade("q", chunks(*TEXTS))

    assert [g.score for g in grades] == [0.8, 0.4, 0.1]
    assert all(g.grader == "lexical" and g.note.startswith("reranker unusable (") and g.note.endswith("used lexical")
               for g in grades)
    assert len(reranker.calls) == 1
    graded = Graded(chunks=chunks(*TEXTS), grades=grades, verdict=Verdict.AMBIGUOUS, kept=[])
    assert graded.fallback_note.startswith("3 of 3 grades by a fallback (reranker unusable")  # the run's degraded


async def test_a_reranker_that_hangs_is_ended_by_the_runs_deadline() -> None:
    reranker = FakeReranker(hangs=True)
    with spending(Budget(deadline=time.monotonic() + 0.05)):
        grades = await RerankGrader(reranker, TableGrader(LEXICAL)).grade("q", chunks(*TEXTS))
    assert [g.score for g in grades] == [0.8, 0.4, 0.1]
    assert "DeadlineReached" in grades[0].note


def test_its_thresholds_are_its_own_and_pass_through_the_cache_and_the_cascade(tmp_path) -> None:
    grader = RerankGrader(FakeReranker(), TableGrader({}), thresholds=(0.7, 0.2))
    cached = CachedGrader(grader, GradeCache(tmp_path / "grades.sqlite"), model="m", version="v")
    assert thresholds_of(grader) == thresholds_of(cached) == (0.7, 0.2)
    assert thresholds_of(CascadeGrader(TableGrader({}), cached, band=(0.3, 0.7))) == (0.7, 0.2)
    assert thresholds_of(RerankGrader(FakeReranker(), TableGrader({}))) == RERANK_THRESHOLDS
    assert thresholds_of(RerankGrader, None, 0.05) == (RERANK_THRESHOLDS[0], 0.05)  # what the wiring reads
    with pytest.raises(ValueError, match="thresholds"):
        RerankGrader(FakeReranker(), TableGrader({}), thresholds=(0.2, 0.7))


async def test_cached_chunks_are_not_sent_again_and_the_rest_go_in_one_request(tmp_path) -> None:
    reranker = FakeReranker({TEXTS[0]: 0.9, TEXTS[1]: 0.3, TEXTS[2]: 0.6})
    cached = CachedGrader(RerankGrader(reranker, TableGrader({})), GradeCache(tmp_path / "grades.sqlite"),
                          model="http://127.0.0.1:1|bge", version="v")
    await cached.grade("q", chunks(*TEXTS[:2]))
    grades = await cached.grade("q", chunks(*TEXTS))

    assert reranker.calls == [list(TEXTS[:2]), [TEXTS[2]]]
    assert [(g.score, g.cached) for g in grades] == [(0.9, True), (0.3, True), (0.6, False)]


async def test_a_fallback_grade_is_not_cached(tmp_path) -> None:
    down = FakeReranker(fails=RerankError("down"))
    cache = GradeCache(tmp_path / "grades.sqlite")
    await CachedGrader(RerankGrader(down, TableGrader(LEXICAL)), cache, model="m", version="v").grade("q", chunks(*TEXTS))
    up = FakeReranker({TEXTS[0]: 0.9})
    await CachedGrader(RerankGrader(up, TableGrader(LEXICAL)), cache, model="m", version="v").grade("q", chunks(*TEXTS))
    assert up.calls == [list(TEXTS)], "the reranker is asked again once it is back"


async def test_the_cascade_sends_the_reranker_only_the_undecided_band() -> None:
    reranker = FakeReranker({TEXTS[1]: 0.9})
    cascade = CascadeGrader(TableGrader(LEXICAL), RerankGrader(reranker, TableGrader(LEXICAL)), band=(0.3, 0.7))
    grades = await cascade.grade("q", chunks(*TEXTS))

    assert reranker.calls == [[TEXTS[1]]], "0.8 is surely relevant, 0.1 surely not: only 0.4 is asked"
    assert [(g.score, g.grader) for g in grades] == [(0.8, "lexical"), (0.9, "rerank"), (0.1, "lexical")]
    clear = FakeReranker()
    cascade = CascadeGrader(TableGrader(LEXICAL), RerankGrader(clear, TableGrader(LEXICAL)), band=(0.3, 0.7))
    await cascade.grade("q", chunks(TEXTS[0], TEXTS[2]))
    assert clear.calls == [], "no undecided chunk: no request"


def test_the_reranker_order_puts_its_grades_best_first_in_their_places() -> None:
    def grade(score: float, grader: str = "rerank", note: str | None = None) -> Grade:
        return Grade(chunk_id="x", score=score, grader=grader, note=note)

    assert reranker_order([grade(0.2), grade(0.9), grade(0.5)]) == [1, 2, 0]
    # A cascade's lexical grades keep their places; the reranker's fill the others in its order.
    assert reranker_order([grade(0.2), grade(0.8, "lexical"), grade(0.9)]) == [2, 1, 0]
    # Another grader's, or the reranker's fallback's, keep the chunks' order.
    assert reranker_order([grade(0.2, "llm"), grade(0.9, "llm")]) == [0, 1]
    assert reranker_order([grade(0.2, "lexical", "reranker unusable"), grade(0.9, "lexical", "x")]) == [0, 1]
    assert reranker_order([grade(0.5), grade(0.5), grade(0.7)]) == [2, 0, 1], "ties keep their order"


class ListRetriever:
    def __init__(self, found: list[NodeWithScore]) -> None:
        self.found = found

    async def retrieve(self, query: str) -> list[NodeWithScore]:
        return self.found


async def test_the_kept_chunks_are_in_the_rerankers_order() -> None:
    found = chunks(*TEXTS)
    reranker = FakeReranker({TEXTS[0]: 0.3, TEXTS[1]: 0.95, TEXTS[2]: 0.6})
    retrieval = GradedRetrieval(ListRetriever(found), RerankGrader(reranker, TableGrader(LEXICAL)))
    graded = await retrieval.graded("q")

    assert [c.node.get_content() for c in graded.kept] == [TEXTS[1], TEXTS[2], TEXTS[0]]
    assert [g.chunk_id for g in graded.grades] == ["c0", "c1", "c2"], "grades stay in chunk order"
    down = GradedRetrieval(ListRetriever(found), RerankGrader(FakeReranker(fails=RerankError("x")), TableGrader(LEXICAL)))
    assert [c.node.get_content() for c in (await down.graded("q")).kept] == list(TEXTS), "the chunks' own order"
