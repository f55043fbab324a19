"""Graders that spend fewer model calls: cached, cascaded and batched grading."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from crag.errors import GradeParseError
from crag.events import Grade
from crag.index.grade_cache import GradeCache
from crag.steps.grading import (
    BatchLLMGrader,
    CachedGrader,
    CascadeGrader,
    LLMGrader,
    parse_batch_grades,
    prompt_version,
)
from crag.testing import FakeLLM, FixedGrader
from crag.trace import StepRecord, attributing_calls_to

QUERY = "How long is the Helio H10 warranty?"


def chunks(*texts: str) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(id_=f"c{i}", text=t), score=1.0) for i, t in enumerate(texts)]


class ScoresByText:
    """An offline grader whose score is written in the chunk: 'score=0.4 ...'."""

    name = "lexical"

    async def grade(self, query: str, nodes: Sequence[NodeWithScore]) -> list[Grade]:
        return [Grade(chunk_id=n.node.node_id, score=float(n.node.get_content().split()[0][6:]),
                      grader=self.name) for n in nodes]


@pytest.fixture
def cache(tmp_path: Path) -> GradeCache:
    return GradeCache(tmp_path / "grades.sqlite")


async def test_a_cached_grade_is_not_asked_for_again_and_is_marked(cache: GradeCache) -> None:
    llm = FakeLLM(reply=lambda prompt: "8")
    grader = CachedGrader(LLMGrader(llm, fallback=FixedGrader(0.0)), cache, model="fake")
    docs = chunks("The H10 has a 12-year warranty.", "Lumen sells heat pumps.")
    first = await grader.grade(QUERY, docs)
    record = StepRecord(name="grade", input_event="RetrievedEvent", started=0.0)
    with attributing_calls_to(record):
        again = await grader.grade(QUERY, docs)
    assert len(llm.calls) == 2, "the second ask made model calls"
    assert [g.score for g in again] == [g.score for g in first] == [0.8, 0.8]
    assert all(g.cached for g in again) and not any(g.cached for g in first)
    assert record.cache_hits == 2


async def test_a_chunk_with_new_text_is_graded_anew(cache: GradeCache) -> None:
    llm = FakeLLM(reply=lambda prompt: "9" if "12-year" in prompt else "2")
    grader = CachedGrader(LLMGrader(llm, fallback=FixedGrader(0.0)), cache, model="fake")
    await grader.grade(QUERY, chunks("The H10 has a 5-year warranty."))
    (grade,) = await grader.grade(QUERY, chunks("The H10 has a 12-year warranty."))  # same id, new text
    assert (grade.score, grade.cached) == (0.9, False)


async def test_another_model_or_prompt_does_not_read_the_cache(cache: GradeCache) -> None:
    llm = FakeLLM(reply=lambda prompt: "7")
    docs = chunks("The H10 has a 12-year warranty.")
    await CachedGrader(LLMGrader(llm, fallback=FixedGrader(0.0)), cache, model="a").grade(QUERY, docs)
    for other in (dict(model="b"), dict(model="a", version=prompt_version("another prompt"))):
        (grade,) = await CachedGrader(LLMGrader(llm, fallback=FixedGrader(0.0)), cache, **other).grade(QUERY, docs)
        assert not grade.cached
    assert len(llm.calls) == 3


async def test_a_fallback_grade_is_not_kept(cache: GradeCache) -> None:
    llm = FakeLLM(reply=lambda prompt: "perhaps")  # unparseable: the fallback grades
    grader = CachedGrader(LLMGrader(llm, fallback=FixedGrader(0.3)), cache, model="fake")
    docs = chunks("The H10 has a 12-year warranty.")
    await grader.grade(QUERY, docs)
    (grade,) = await grader.grade(QUERY, docs)
    assert not grade.cached and len(llm.calls) == 2


async def test_the_cascade_asks_the_model_only_inside_the_band() -> None:
    llm = FakeLLM(reply=lambda prompt: "10")
    cascade = CascadeGrader(ScoresByText(), LLMGrader(llm, fallback=FixedGrader(0.0)), band=(0.3, 0.7))
    grades = await cascade.grade(QUERY, chunks("score=0.1 a", "score=0.5 b", "score=0.9 c", "score=0.3 d"))
    assert [g.score for g in grades] == [0.1, 1.0, 0.9, 1.0]
    assert [g.grader for g in grades] == ["lexical", "llm", "lexical", "llm"]
    assert len(llm.calls) == 2


def test_a_cascade_band_out_of_order_is_refused() -> None:
    with pytest.raises(ValueError, match="band"):
        CascadeGrader(ScoresByText(), FixedGrader(1.0), band=(0.8, 0.2))


async def test_a_batch_is_graded_in_one_call() -> None:
    llm = FakeLLM(reply=lambda prompt: "[9, 0, 4.5]")
    grader = BatchLLMGrader(llm, per_chunk=FixedGrader(0.0))
    grades = await grader.grade(QUERY, chunks("a", "b", "c"))
    assert [g.score for g in grades] == [0.9, 0.0, 0.45]
    assert len(llm.calls) == 1 and "[3] c" in llm.calls[0]


@pytest.mark.parametrize("reply", ["[9, 0]", "nine, zero, four", "[9, 0, 11]", "[9, 0, \"x\"]", "[9, 0,"])
async def test_a_malformed_batch_reply_falls_back_to_chunk_by_chunk_and_says_so(reply: str) -> None:
    per_chunk_llm = FakeLLM(reply=lambda prompt: "6")
    grader = BatchLLMGrader(FakeLLM(reply=lambda prompt: reply),
                            per_chunk=LLMGrader(per_chunk_llm, fallback=FixedGrader(0.0)))
    record = StepRecord(name="grade", input_event="RetrievedEvent", started=0.0)
    with attributing_calls_to(record):
        grades = await grader.grade(QUERY, chunks("a", "b", "c"))
    assert [g.score for g in grades] == [0.6, 0.6, 0.6]
    assert len(per_chunk_llm.calls) == 3
    assert record.degraded and "batch grading unusable" in record.degraded


def test_batch_replies_are_read_strictly() -> None:
    assert parse_batch_grades("[10, 2, 0]", 3) == [1.0, 0.2, 0.0]
    assert parse_batch_grades("```json\n[10, 2, 0]\n```", 3) == [1.0, 0.2, 0.0]
    with pytest.raises(GradeParseError, match="not a JSON list alone"):
        parse_batch_grades("Here: [10, 2, 0]", 3)  # prose around the list
    with pytest.raises(GradeParseError, match="not a JSON list"):
        parse_batch_grades("[10, 2, 0] and [1, 1, 1]", 3)
    with pytest.raises(GradeParseError, match="rates 2 documents, not 3"):
        parse_batch_grades("[1, 2]", 3)
    with pytest.raises(GradeParseError, match="True"):
        parse_batch_grades("[true, 2, 3]", 3)
