"""Runs graded by a rerank server (`[grader] kind = "rerank"`, or a cascade with a `[reranker]`):
one request per question, and a reranker that is down, slow or answers garbage still leaves an
answer inside the run's limit, marked degraded, with the lexical evaluator's grades."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.loopback import Drop, LoopbackServer, Reply, Stall
from support.rerank_servers import rerank_api

import crag
from crag.config import Settings
from crag.errors import ConfigError
from crag.steps.grading import CachedGrader, CascadeGrader, LexicalEvaluator, RerankGrader

WARRANTY = "What warranty does Lumen give on the Helio H10?"


def settings(index: Path, url: str | None, **sections: dict[str, Any]) -> Settings:
    """Offline settings (no LLM, no web) grading with the rerank server at `url`."""
    reranker = {"base_url": url, "shape": "tei", "timeout": 1.0, **sections.pop("reranker", {})}
    return Settings.load(env={}, index={"path": index}, web_search={"kind": "none"},
                         cache=sections.pop("cache", {"enabled": False}),
                         grader={"kind": "rerank", **sections.pop("grader", {})},
                         reranker=reranker if url else {}, **sections)


async def ask(index: Path, url: str, **sections: dict[str, Any]) -> Any:
    return await crag.build_workflow(settings(index, url, **sections)).run(query=WARRANTY)


async def test_a_question_is_graded_in_one_request(own_sample_index_dir: Path) -> None:
    with LoopbackServer(rerank_api("tei")) as server:
        result = await ask(own_sample_index_dir, server.url)

    (request,) = server.requests_to("/rerank")
    assert len(request.json["texts"]) == len(result.grades) > 1
    assert {g.grader for g in result.grades} == {"rerank"}
    assert not any("reranker" in line for line in result.degraded)


@pytest.mark.parametrize("answer", [
    Drop(),  # down: the connection closes unanswered
    Reply(503, {"error": "loading model"}),
    Reply(200, [{"index": 9, "score": 0.5}]),  # garbage: an index it was not sent
    Reply(200, [{"index": 0, "score": float("nan")}]),  # NaN, and missing the rest
    Reply(200, "<html>not json</html>"),
    Stall(3600),  # slow: beyond its 1 s timeout, twice (one retry)
], ids=["down", "503", "wrong-index", "nan", "not-json", "slow"])
async def test_a_reranker_that_cannot_grade_leaves_an_answer_marked_degraded_with_lexical_grades(
    own_sample_index_dir: Path, answer: Any,
) -> None:
    with LoopbackServer(lambda request: answer) as server:
        result = await ask(own_sample_index_dir, server.url, run={"timeout": 30})

    assert result.answer.strip()
    assert {g.grader for g in result.grades} == {"lexical"}
    assert all(g.note.startswith("reranker unusable (") for g in result.grades)
    assert any(line.startswith("grade: ") and "reranker unusable" in line for line in result.degraded)
    assert 1 <= len(server.requests_to("/rerank")) <= 2, "retried once at most"


async def test_a_reranker_that_never_answers_is_ended_by_the_runs_deadline(own_sample_index_dir: Path) -> None:
    """Its own timeout is longer than the run's: the run's deadline ends the request, and the
    offline evaluator still grades inside the run's limit."""
    with LoopbackServer(lambda request: Stall(3600)) as server:
        result = await ask(own_sample_index_dir, server.url, reranker={"timeout": 600},
                           run={"timeout": 3, "fallback_seconds": 1.5})

    assert result.answer.strip()
    assert {g.grader for g in result.grades} == {"lexical"}
    assert any("reranker unusable" in line and "deadline" in line.lower() for line in result.degraded)


async def test_the_cascade_sends_the_reranker_only_what_the_evaluator_is_unsure_of(own_sample_index_dir: Path) -> None:
    with LoopbackServer(rerank_api("tei")) as server:
        result = await ask(own_sample_index_dir, server.url, grader={"kind": "cascade"})

    sent = [len(r.json["texts"]) for r in server.requests_to("/rerank")]
    assert sent in ([], [sum(g.grader == "rerank" for g in result.grades)])
    assert sum(sent) < len(result.grades), "the clear cases are the evaluator's"


def test_kind_rerank_without_a_reranker_is_a_clear_error(own_sample_index_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[reranker\] base_url.*\[reranker\] model_dir"):
        crag.build_workflow(settings(own_sample_index_dir, None))


def test_a_configured_reranker_is_the_model_of_auto_and_cascade(own_sample_index_dir: Path) -> None:
    url = "http://127.0.0.1:9"  # never called: building connects to nothing
    auto = crag.build_workflow(settings(own_sample_index_dir, url, grader={"kind": "auto"}, cache={"enabled": True}))
    assert isinstance(auto.grader, CachedGrader) and isinstance(auto.grader.grader, RerankGrader)
    assert auto.grader.model == f"{url}|" and auto.upper == 0.5 and auto.lower == 0.1
    cascade = crag.build_workflow(settings(own_sample_index_dir, url, grader={"kind": "cascade"},
                                           reranker={"upper": 0.8, "lower": 0.2}))
    assert isinstance(cascade.grader, CascadeGrader) and isinstance(cascade.grader.model, RerankGrader)
    assert (cascade.upper, cascade.lower) == (0.8, 0.2), "the fitted thresholds are read"
    plain = crag.build_workflow(settings(own_sample_index_dir, None, grader={"kind": "auto"}))
    assert isinstance(plain.grader, LexicalEvaluator), "no reranker, no model: the offline evaluator"
