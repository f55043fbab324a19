"""A model's cost: tokens counted call for call, a budget never exceeded, the record it adds up to."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.schema import NodeWithScore, TextNode
from support.loopback import (
    LoopbackServer,
    Reply,
    chat_completion,
    message_text,
    openai_chat,
    uvicorn_serving,
)
from support.paths import SAMPLES

import crag
from crag.app.cli import main
from crag.app.server import build_server
from crag.budget import Budget, BudgetReached, spending
from crag.config import Settings
from crag.cost import CostRecord, cost_of, count_tokens, total
from crag.events import CragResult
from crag.ingestion.configured import llm_options
from crag.models import BudgetedLLM, openai_llm
from crag.steps.grading import LLMGrader
from crag.steps.rewriting import LLMRewriter
from crag.testing import FakeLLM, FixedGrader
from crag.trace import StepRecord, attributing_calls_to, install_llm_call_counter

QUERY = "How long is the Helio H10 warranty?"


def chunks(n: int) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(id_=f"c{i}", text=f"chunk {i}"), score=1.0) for i in range(n)]


def step(name: str, **counts: int) -> StepRecord:
    return StepRecord(name=name, input_event="E", started=0.0, **counts)


def test_the_record_adds_steps_up_and_prices_tokens_per_million() -> None:
    record = cost_of(
        [step("grade", llm_calls=5, prompt_tokens=1000, completion_tokens=10, cache_hits=0),
         step("retrieve"),
         step("synthesize", llm_calls=1, prompt_tokens=2000, completion_tokens=90)],
        price_in=0.15, price_out=0.60,
    )
    assert (record.calls, record.tokens_in, record.tokens_out) == (6, 3000, 100)
    assert set(record.per_step) == {"grade", "synthesize"}, "a step with no calls is left out"
    assert record.money == pytest.approx((3000 * 0.15 + 100 * 0.60) / 1e6)
    assert record.line().startswith("cost: 6 model calls, 3,000 tokens in, 100 out")


def test_without_prices_there_is_no_money_and_totals_add_runs() -> None:
    one = cost_of([step("grade", llm_calls=2, prompt_tokens=10, completion_tokens=2)])
    assert one.money is None
    both = total([one, one])
    assert (both.calls, both.tokens_in, both.per_step["grade"].calls) == (4, 20, 4)
    assert CostRecord.model_validate_json(both.model_dump_json()) == both


async def test_a_budget_is_never_exceeded_by_concurrent_grading() -> None:
    llm = FakeLLM(reply=lambda prompt: "9", latency=0.01)
    grader = LLMGrader(BudgetedLLM(llm=llm), fallback=FixedGrader(0.2), concurrency=8)
    budget = Budget(calls=2)
    with spending(budget):
        grades = await grader.grade(QUERY, chunks(5))
    assert len(llm.calls) == 2
    assert sorted(g.score for g in grades) == [0.2, 0.2, 0.2, 0.9, 0.9]
    assert all("BudgetReached" in g.note for g in grades if g.score == 0.2)
    assert "budget" in budget.note() and "3 model call(s) not made" in budget.note()


async def test_a_token_budget_refuses_the_call_after_it_is_spent() -> None:
    llm = BudgetedLLM(llm=FakeLLM(reply=lambda prompt: "a reply of several words"))
    budget = Budget(tokens=5)
    with spending(budget):
        await llm.achat([ChatMessage(role="user", content="a question")])
        with pytest.raises(BudgetReached, match="tokens"):
            await llm.achat([ChatMessage(role="user", content="another")])
    assert budget.spent_calls == 1 and budget.spent_tokens >= 5


async def test_outside_a_budget_calls_are_not_limited() -> None:
    llm = FakeLLM(reply=lambda prompt: "ok")
    budgeted = BudgetedLLM(llm=llm)
    await asyncio.gather(*(budgeted.achat([ChatMessage(role="user", content="q")]) for _ in range(3)))
    assert len(llm.calls) == 3


def _openai(server: LoopbackServer):  # noqa: ANN202
    settings = Settings.load(env={"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-test"})
    return openai_llm(llm_options(settings))


def _no_usage(request):  # noqa: ANN001, ANN202
    body = chat_completion("eight", model="m", prompt_text=message_text(request))
    del body["usage"]
    return Reply(200, body)


async def test_tokens_are_the_servers_figures_call_for_call() -> None:
    install_llm_call_counter()
    with LoopbackServer(lambda r: Reply(200, chat_completion("8", model="m", prompt_text=message_text(r)))) as server:
        record = step("grade")
        with attributing_calls_to(record):
            await _openai(server).achat([ChatMessage(role="user", content="one two three")])
    assert (record.llm_calls, record.prompt_tokens, record.completion_tokens) == (1, 3, 1)
    assert not record.estimated_tokens


async def test_usage_missing_from_a_response_is_counted_here_and_marked_estimated() -> None:
    install_llm_call_counter()
    with LoopbackServer(_no_usage) as server:
        record = step("grade")
        with attributing_calls_to(record):
            await _openai(server).achat([ChatMessage(role="user", content="one two three")])
    assert record.estimated_tokens
    assert record.prompt_tokens == count_tokens("one two three") and record.completion_tokens == count_tokens("eight")
    assert cost_of([record]).estimated


# --- through the command line, against a model server that reports usage ----------------------

LIION = "Who invented the lithium-ion battery?"


def _is_grading(prompt: str) -> bool:
    return "Rate how relevant the document is" in prompt


def _model(prompt: str) -> str:
    return "1" if _is_grading(prompt) else "John Goodenough's team built it [1]."


@pytest.fixture
def model_env(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    with LoopbackServer(openai_chat(_model)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield server


def _ask_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["ask", *argv, "--json", "-q"]) == 0
    return json.loads(capsys.readouterr().out)


def _grading_calls(server: LoopbackServer) -> int:
    return sum(_is_grading(message_text(r)) for r in server.requests_to("/chat/completions"))


def test_ask_json_carries_the_cost_and_asking_again_grades_from_the_cache(
    capsys: pytest.CaptureFixture[str], model_env: LoopbackServer, own_sample_index_dir: Path
) -> None:
    question = "What warranty does Lumen give on the Helio H10?"
    first = _ask_json(capsys, question, "--index", str(own_sample_index_dir))
    graded = _grading_calls(model_env)
    assert graded == len(first["grades"]) > 0
    cost = first["cost"]
    assert cost["calls"] == len(model_env.requests_to("/chat/completions"))
    assert cost["tokens_in"] > 0 and cost["tokens_out"] > 0 and not cost["estimated"]
    assert cost["per_step"]["grade"]["calls"] == graded

    again = _ask_json(capsys, question.upper() + "  ", "--index", str(own_sample_index_dir))
    assert _grading_calls(model_env) == graded, "the same question again makes no grading call"
    assert again["cost"]["cache_hits"] == graded and "grade" not in again["cost"]["per_step"] or \
        again["cost"]["per_step"]["grade"]["calls"] == 0
    assert all(g["cached"] for g in again["grades"])
    assert [g["score"] for g in again["grades"]] == [g["score"] for g in first["grades"]]


def test_a_call_budget_bounds_a_web_question_which_is_still_answered(
    capsys: pytest.CaptureFixture[str], model_env: LoopbackServer, own_sample_index_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRAG_BUDGET__CALLS", "2")
    result = _ask_json(capsys, LIION, "--index", str(own_sample_index_dir),
                       "--web-corpus", str(SAMPLES / "web.jsonl"))
    assert len(model_env.requests_to("/chat/completions")) <= 2
    assert result["cost"]["calls"] <= 2
    assert result["verdict"] == "incorrect" and result["answer"].strip()
    assert any("budget" in note for note in result["degraded"])
    assert any("budget" in note for note in result["cost"]["notes"])
    assert any("budget" in note for note in result["trace"]["notes"])


def test_no_speculative_rewrite_when_the_budget_cannot_also_pay_for_grading_and_the_answer(
    capsys: pytest.CaptureFixture[str], model_env: LoopbackServer, own_sample_index_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 31: a speculative rewrite spent half of a 2-call budget, and its query was not used.
    With 2 calls and chunks to grade, the grades come first; the rewrite waits for the verdict."""
    monkeypatch.setenv("CRAG_BUDGET__CALLS", "2")
    result = _ask_json(capsys, "What warranty does Lumen give on the Helio H10?", "--index", str(own_sample_index_dir))
    prompts = [message_text(r) for r in model_env.requests_to("/chat/completions")]
    assert prompts and all(_is_grading(p) for p in prompts), "both calls graded; none rewrote ahead of the verdict"
    assert result["cost"]["per_step"].get("rewrite") is None


def test_the_budget_flag_overrides_the_environment_and_the_last_line_is_the_cost(
    capsys: pytest.CaptureFixture[str], model_env: LoopbackServer, own_sample_index_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRAG_BUDGET__CALLS", "50")
    assert main(["ask", LIION, "--index", str(own_sample_index_dir), "--budget-calls", "0", "-q"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert model_env.requests_to("/chat/completions") == []
    assert lines[-1].startswith("cost: 0 model calls") and "budget" in lines[-1]


def test_cache_stats_and_clear(capsys: pytest.CaptureFixture[str], model_env: LoopbackServer,
                               own_sample_index_dir: Path) -> None:
    _ask_json(capsys, "What warranty does Lumen give on the Helio H10?", "--index", str(own_sample_index_dir))
    assert main(["cache", "stats", "--index", str(own_sample_index_dir)]) == 0
    assert re.search(r": [1-9]\d* grade\(s\) of at most 100,000", capsys.readouterr().out)
    assert main(["cache", "clear", "--index", str(own_sample_index_dir)]) == 0
    assert re.match(r"cleared [1-9]\d* grade\(s\)", capsys.readouterr().out)
    assert main(["cache", "stats", "--index", str(own_sample_index_dir)]) == 0
    assert ": 0 grade(s)" in capsys.readouterr().out


def test_a_served_run_keeps_its_budget_and_records_its_cost(
    model_env: LoopbackServer, own_sample_index_dir: Path, tmp_path: Path
) -> None:
    settings = Settings.load(
        env={"OPENAI_BASE_URL": model_env.url + "/v1", "OPENAI_API_KEY": "sk-test", "CRAG_BUDGET__CALLS": "2"},
        index={"path": own_sample_index_dir}, web_search={"corpus": SAMPLES / "web.jsonl"},
        server={"store": str(tmp_path / "server.db")},
    )
    with uvicorn_serving(build_server(settings).app) as url:
        reply = httpx.post(f"{url}/workflows/crag/run", json={"start_event": {"query": LIION}}, timeout=60)
        again = httpx.post(f"{url}/workflows/crag/run", json={"start_event": {"query": LIION}}, timeout=60)
    assert reply.status_code == again.status_code == 200
    for body in (reply.json(), again.json()):
        result = CragResult.model_validate(body["result"]["value"]["result"])
        assert result.cost.calls <= 2 and any("budget" in n for n in result.cost.notes)
        assert result.answer.strip()
    assert len(model_env.requests_to("/chat/completions")) <= 4, "each run has a budget of its own"


def test_the_trace_page_shows_each_steps_tokens_cache_hits_and_the_budget(
    capsys: pytest.CaptureFixture[str], model_env: LoopbackServer, own_sample_index_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from crag.app.render import trace_html
    from crag.app.render.explain import explanation_html
    from crag.workflows import CorrectiveRAGWorkflow

    question = "What warranty does Lumen give on the Helio H10?"
    _ask_json(capsys, question, "--index", str(own_sample_index_dir))  # fills the cache
    monkeypatch.setenv("CRAG_BUDGET__CALLS", "0")
    result = CragResult.model_validate(_ask_json(capsys, question, "--index", str(own_sample_index_dir)))
    page = trace_html(CorrectiveRAGWorkflow, result.trace)
    assert re.search(r"\d+ cached", page) and "grades from the cache" in page
    assert "budget reached" in page
    fragment = explanation_html(result.trace.explanation, result.cost)
    assert "budget reached" in fragment and "cached grade" in fragment


async def test_a_speculative_rewrite_still_calling_when_the_answer_is_ready_is_counted(
    sample_settings: Settings, sample_index: crag.ChunkIndex
) -> None:
    llm = FakeLLM(reply=lambda prompt: "helio warranty", latency=0.3)  # slower than the whole run
    workflow = crag.build_workflow(sample_settings, index=sample_index, rewriter=LLMRewriter(llm))
    result = await workflow.run(query="What warranty does Lumen give on the Helio H10?")
    assert result.verdict.value == "correct" and len(llm.calls) == 1
    assert result.cost.per_step["rewrite"].calls == 1 == result.cost.calls


class _HangingRewriter:
    async def rewrite(self, query: str) -> str:
        await asyncio.Event().wait()
        return query


async def test_a_hanging_speculative_step_does_not_hold_a_ready_answer(
    sample_settings: Settings, sample_index: crag.ChunkIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("crag.workflows.base.SETTLE_SECONDS", 0.05)
    workflow = crag.build_workflow(sample_settings, index=sample_index, rewriter=_HangingRewriter())
    result = await workflow.run(query="What warranty does Lumen give on the Helio H10?")
    assert result.verdict.value == "correct" and "12-year" in result.answer
    assert any("still calling the model" in note for note in result.trace.notes)


def test_a_streamed_answer_is_counted_from_the_usage_the_server_reports_at_its_end(
    own_sample_index_dir: Path,
) -> None:
    def model(prompt: str) -> str:
        return "9" if _is_grading(prompt) else "It carries a 12-year warranty [1]."

    with LoopbackServer(openai_chat(model)) as server:
        settings = Settings.load(env={"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-test"},
                                 index={"path": own_sample_index_dir}, cache={"enabled": False})
        result = crag.build_workflow(settings).ask("What warranty does Lumen give on the Helio H10?")
    requests = server.requests_to("/chat/completions")
    (streamed,) = [r for r in requests if (r.json or {}).get("stream")]
    assert streamed.json["stream_options"] == {"include_usage": True}
    assert result.cost.per_step["synthesize"].calls == 1 and not result.cost.estimated
    assert result.cost.tokens_in == sum(max(1, len(message_text(r).split())) for r in requests)


async def test_mcp_search_keeps_the_runs_budget(
    model_env: LoopbackServer, own_sample_index_dir: Path, tmp_path: Path
) -> None:
    """`search` grades with the model as a run does, so the run's call budget bounds it too."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    settings = Settings.load(
        env={"OPENAI_BASE_URL": model_env.url + "/v1", "OPENAI_API_KEY": "sk-test", "CRAG_BUDGET__CALLS": "1",
             "CRAG_GRADER__KIND": "llm"},
        index={"path": own_sample_index_dir}, server={"store": str(tmp_path / "server.db")},
    )
    with uvicorn_serving(build_server(settings).app) as url:
        async with httpx2.AsyncClient(timeout=60) as http, \
                Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
            found = await client.call_tool("search", {"question": "How long is the Helio H10 warranty?"})
    assert not found.is_error and found.structured_content["chunks"]  # graded offline past the budget
    assert _grading_calls(model_env) <= 1
