"""Retrieve → postprocess → grade → verdict: one component, and every caller goes through it."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

import crag
from crag.budget import Budget
from crag.errors import ConfigError
from crag.events import Grade, Verdict
from crag.steps.graded_retrieval import GradedRetrieval

SRC = Path(crag.__file__).parent


def chunk(text: str, title: str = "") -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=text, text=text, metadata={"title": title} if title else {}), score=1.0)


class ListRetriever:
    def __init__(self, *texts: str) -> None:
        self.texts = texts
        self.asked: list[str] = []

    async def retrieve(self, query: str) -> list[NodeWithScore]:
        self.asked.append(query)
        return [chunk(t) for t in self.texts]


class ScoresByText:
    """Grades each chunk by the score its text names; remembers what it was asked."""

    def __init__(self, **scores: float) -> None:
        self.scores = scores
        self.asked: list[tuple[str, list[str]]] = []

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        self.asked.append((query, [c.node.node_id for c in chunks]))
        return [Grade(chunk_id=c.node.node_id, score=self.scores[c.node.node_id], grader="by-text") for c in chunks]


class DropText:
    def __init__(self, text: str) -> None:
        self.text = text

    async def postprocess(self, query: str, chunks: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        return [c for c in chunks if c.node.node_id != self.text]


class HalfCovered:
    def __init__(self) -> None:
        self.judged: list[list[str]] = []

    def coverage(self, query: str, texts: Sequence[tuple[str, str | None]]) -> float:
        self.judged.append([text for text, _ in texts])
        return 0.5


def retrieval(grader: object, *texts: str, **kwargs: object) -> GradedRetrieval:
    return GradedRetrieval(ListRetriever(*texts), grader, upper=0.7, lower=0.3, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("scores", "verdict"),
    [({"a": 0.9, "b": 0.1}, Verdict.CORRECT), ({"a": 0.5, "b": 0.1}, Verdict.AMBIGUOUS),
     ({"a": 0.2, "b": 0.1}, Verdict.INCORRECT)],
)
async def test_the_verdict_follows_the_paper_and_only_chunks_at_the_lower_threshold_are_kept(
    scores: dict[str, float], verdict: Verdict
) -> None:
    graded = await retrieval(ScoresByText(**scores), "a", "b").graded("q")
    assert graded.verdict is verdict
    assert [g.score for g in graded.grades] == [scores["a"], scores["b"]]
    assert [c.node.node_id for c in graded.kept] == [t for t in "ab" if scores[t] >= 0.3]


async def test_postprocessing_runs_before_grading_so_a_dropped_chunk_is_never_graded() -> None:
    grader = ScoresByText(a=0.9, b=0.1)
    graded = await retrieval(grader, "a", "b", postprocessors=[DropText("a")]).graded("q")
    assert grader.asked == [("q", ["b"])]
    assert graded.verdict is Verdict.INCORRECT


async def test_a_hop_retrieves_with_one_query_keeps_what_it_is_about_and_grades_against_another() -> None:
    grader = ScoresByText(a=0.9, b=0.1)
    search = retrieval(grader, "a", "b")
    found = [c for c in await search.find("the bridge") if c.node.node_id == "b"]
    graded = await search.grade("the question and the bridge", found)
    assert search.retriever.asked == ["the bridge"]  # type: ignore[attr-defined]
    assert grader.asked == [("the question and the bridge", ["b"])]
    assert graded.verdict is Verdict.INCORRECT


async def test_the_set_judgment_applies_to_the_whole_question_only_and_only_when_a_chunk_reaches_upper() -> None:
    judge = HalfCovered()
    search = retrieval(ScoresByText(a=0.9, b=0.5, c=0.1), "a", "b", "c", judge=judge, cover=0.8)
    whole = await search.graded("q", whole=True)
    assert (whole.verdict, whole.coverage) == (Verdict.AMBIGUOUS, 0.5)  # half covered holds back Correct
    assert judge.judged == [["a", "b"]]  # the kept chunks, together
    part = await search.graded("q")
    assert (part.verdict, part.coverage) == (Verdict.CORRECT, None)
    below = await retrieval(ScoresByText(a=0.5), "a", judge=judge, cover=0.8).graded("q", whole=True)
    assert below.coverage is None and len(judge.judged) == 1


def test_thresholds_are_the_graders_own_unless_given_and_lower_may_not_exceed_upper() -> None:
    class Fitted(ScoresByText):
        thresholds = (0.6, 0.2)

    assert (GradedRetrieval(ListRetriever(), Fitted()).upper, GradedRetrieval(ListRetriever(), Fitted()).lower) == (0.6, 0.2)
    with pytest.raises(ConfigError, match=r"lower threshold \(0.8\) must not exceed upper \(0.6\)"):
        GradedRetrieval(ListRetriever(), Fitted(), lower=0.8)


async def test_a_retrieval_without_a_grader_finds_but_refuses_to_grade() -> None:
    found = GradedRetrieval(ListRetriever("a", "b"), postprocessors=[DropText("b")])
    assert [c.node.node_id for c in await found.find("q")] == ["a"]
    with pytest.raises(ConfigError, match="no grader"):
        await found.graded("q")


async def test_a_question_graded_alone_is_ended_at_its_time_limit_under_its_own_budget() -> None:
    seen: list[Budget | None] = []

    class Stalls(ScoresByText):
        async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
            from crag.budget import current_budget

            seen.append(current_budget())
            await asyncio.Event().wait()
            return []

    budget = Budget(calls=3)
    with pytest.raises(asyncio.TimeoutError):
        await retrieval(Stalls(), "a").alone("q", budget=budget, timeout=0.05)
    assert seen == [budget]


def _calls(tree: ast.AST, name: str) -> int:
    return sum(
        isinstance(node, ast.Call)
        and ((isinstance(node.func, ast.Name) and node.func.id == name)
             or (isinstance(node.func, ast.Attribute) and node.func.attr == name
                 and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "grader"))
        for node in ast.walk(tree)
    )


def test_nothing_outside_the_graded_retrieval_postprocesses_or_grades_retrieved_chunks() -> None:
    """The sequence is written once: a new caller that postprocesses, grades or decides a verdict
    by hand would grade other chunks, or by another rule, than a run does."""
    everything = {"apply_postprocessors", "decide_verdict", "grade"}
    allowed = {
        "steps/graded_retrieval.py": everything,
        "steps/postprocessing.py": everything,  # where the stages are defined
        "evaluation/calibrate.py": {"decide_verdict"},  # fitted thresholds over scores it has (`_verdicts`)
    }
    found = []
    for path in SRC.rglob("*.py"):
        where = path.relative_to(SRC).as_posix()
        if where.startswith("steps/grading/"):  # the graders, which wrap one another
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name in sorted(everything - allowed.get(where, set())):
            if _calls(tree, name):
                found.append(f"{where} calls {name}")
    assert not found, "use crag.steps.graded_retrieval.GradedRetrieval instead: " + "; ".join(found)
