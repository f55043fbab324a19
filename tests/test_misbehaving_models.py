"""Real models as they are (issue 31): a model that rambles, echoes the prompt, never stops,
answers "10" to everything or talks around its number degrades a run, never fails it.

Each fake is a loopback OpenAI-compatible server (`loopback.as_a_model_server`) that cuts a
reply at the request's `max_tokens` as a real server does. Every run ends with exit 0 and an
answer; `degraded` and the trace say what ended each unusable call (the length limit, a parse
failure, a rejected query, the deadline), and the cost counts every call the server received.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from support.loopback import (
    LoopbackServer,
    Stall,
    as_a_model_server,
    echoes,
    message_text,
    never_stops,
    prose,
    ten,
)
from support.paths import DATA, SAMPLES

import crag
from crag.app.cli import main
from crag.budget import watching
from crag.config import Settings
from crag.evaluation.runner import _default_concurrency, spent
from crag.events import Turn

WARRANTY = "What warranty does Lumen give on the Helio H10?"
LIION = "Who invented the lithium-ion battery?"

# What ends each call of each model, as the run's `degraded` list says it.
ENDED_BY = {
    never_stops: ["grade: ", "ReplyCutOff: the grade reply was cut at its 8-token limit",
                  "rewrite: rewriter failed (ReplyCutOff", "synthesize: the answer was cut at its 512-token limit"],
    echoes: ["grade: ", "ReplyCutOff: the grade reply was cut", "rewrite: rewriter failed (QueryRejected: "
             "the model's rewrite echoes the prompt"],
    ten: ["rewrite: rewriter failed (QueryRejected: the model's rewrite shares no word with the question: '10')"],
    prose: ["grade: 4 of 4 grades by a fallback", "GradeParseError: the reply is not a 0-10 rating alone",
            "rewrite: rewriter failed (QueryRejected"],
}


@pytest.fixture
def model_env(monkeypatch: pytest.MonkeyPatch, own_sample_index_dir: Path) -> Callable[..., LoopbackServer]:
    """Serve a fake model and point crag at it; returns the server for the test to enter."""

    def serve(reply: Callable[[str], str], **options: bool) -> LoopbackServer:
        server = LoopbackServer(as_a_model_server(reply, **options))
        monkeypatch.setenv("CRAG_INDEX__PATH", str(own_sample_index_dir))
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("CRAG_LLM__MAX_RETRIES", "0")
        return server

    return serve


def ask_json(capsys: pytest.CaptureFixture[str], server: LoopbackServer, monkeypatch: pytest.MonkeyPatch,
             question: str, *argv: str) -> dict:
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    assert main(["ask", question, "--web-corpus", str(SAMPLES / "web.jsonl"), *argv, "--json", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1, "--json prints one object"
    return json.loads(out)


@pytest.mark.parametrize("question", [WARRANTY, LIION])
@pytest.mark.parametrize("model", list(ENDED_BY), ids=lambda m: m.__name__)
def test_crag_ask_answers_whatever_the_model_replies_and_says_what_ended_each_call(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    model_env: Callable[..., LoopbackServer], model: Callable[[str], str], question: str,
) -> None:
    with model_env(model) as server:
        result = ask_json(capsys, server, monkeypatch, question, "--trace", str(tmp_path / "run.json"))

    assert result["answer"].strip()
    degraded = "\n".join(result["degraded"])
    for reason in ENDED_BY[model]:  # the rewrite is speculative: it runs whatever the verdict
        assert reason in degraded, f"{model.__name__}: {reason!r} not in {degraded!r}"
    # Every call the server received is counted, with what it cost; every call sent a limit.
    requests = server.requests_to("/chat/completions")
    assert result["cost"]["calls"] == len(requests) > 0
    assert all(isinstance(r.json.get("max_tokens"), int) for r in requests)
    trace = json.loads((tmp_path / "run.json").read_text())
    assert {s["name"] for s in trace["steps"]} >= {"grade", "synthesize"}
    assert sum(s["llm_calls"] for s in trace["steps"]) == len(requests)


def test_no_grade_is_taken_from_a_reply_that_is_not_the_number(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, model_env: Callable[..., LoopbackServer],
) -> None:
    """"The document is irrelevant to 10." was once read as 1.0: every chunk Correct."""
    with model_env(prose) as server:
        result = ask_json(capsys, server, monkeypatch, LIION)
    assert all(g["grader"] == "lexical" and "GradeParseError" in g["note"] for g in result["grades"])
    assert result["verdict"] == "incorrect"


def test_a_stream_without_usage_is_counted_and_marked_estimated(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, model_env: Callable[..., LoopbackServer],
) -> None:
    def model(prompt: str) -> str:
        return "9" if "Rate how relevant" in prompt else "A 12-year warranty [1]."

    with model_env(model, stream_usage=False) as server:
        result = ask_json(capsys, server, monkeypatch, WARRANTY)
    streamed = [r for r in server.requests_to("/chat/completions") if r.json.get("stream")]
    assert len(streamed) == 1
    assert result["cost"]["per_step"]["synthesize"]["calls"] == 1
    assert result["cost"]["per_step"]["synthesize"]["estimated"] and result["cost"]["estimated"]
    assert result["cost"]["per_step"]["synthesize"]["tokens_out"] > 0


def test_a_model_that_never_stops_and_ignores_the_limit_is_ended_by_the_runs_deadline(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, model_env: Callable[..., LoopbackServer],
) -> None:
    """A server that keeps the request open (it ignores `max_tokens`, or its model never ends):
    each call ends at the run's deadline, and the offline components answer within the limit."""
    monkeypatch.setenv("CRAG_RUN__TIMEOUT", "3")
    monkeypatch.setenv("CRAG_RUN__FALLBACK_SECONDS", "1.5")
    with model_env(never_stops) as server:
        server.handler = lambda request: Stall(3600)
        result = ask_json(capsys, server, monkeypatch, LIION)
    assert result["answer"].strip()
    assert any("DeadlineReached" in line for line in result["degraded"])
    assert any(line.startswith("deadline: ") for line in result["degraded"])
    assert result["cost"]["calls"] == len(server.requests_to("/chat/completions"))


async def test_a_follow_up_condensed_into_a_copy_of_the_previous_answer_is_rejected(
    own_sample_index_dir: Path,
) -> None:
    answer = "Lumen Energy gives a 12-year warranty on the Helio H10 [1]."

    def model(prompt: str) -> str:
        if "standalone question" in prompt:
            return answer  # what a real model did with "What battery does it use?"
        return "9" if "Rate how relevant" in prompt else "It uses a lithium iron phosphate battery [1]."

    with LoopbackServer(as_a_model_server(model)) as server:
        settings = Settings.load(env={"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-test"},
                                 index={"path": own_sample_index_dir})
        workflow = crag.build_workflow(settings)
        history = [Turn(role="user", content=WARRANTY), Turn(role="assistant", content=answer)]
        result = await workflow.run(query="What battery does it use?", history=history)

    assert result.query == "What battery does the Helio H10 use?", "the rules made it standalone"
    assert any("condenser failed (QueryRejected: the model's follow-up copies a previous answer" in line
               for line in result.degraded)


def test_crag_eval_runs_one_question_at_a_time_against_a_local_server_and_counts_every_call(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """A server that serves one request at a time; crag eval's default for a model on this
    machine is one question at a time (eight made 5 of 20 runs reach the run limit, issue 31)."""
    monkeypatch.chdir(tmp_path)
    handler = as_a_model_server(lambda p: "7" if "Rate how relevant" in p else "It is so [1].", one_at_a_time=True)
    with LoopbackServer(handler) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        assert main(["eval", "--dataset", str(DATA / "eval_questions.jsonl"), "--corpus",
                     str(DATA / "eval_corpus.jsonl"), "--systems", "crag", "--limit", "3", "--json"]) == 0
        report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (system,) = report["systems"]
    whole = system["splits"]["all"]
    assert report["concurrency"] == 1 and whole["errors"] == 0
    assert whole["cost"]["calls"] == len(server.requests_to("/chat/completions"))


def test_the_default_eval_concurrency_fits_where_the_model_is_served() -> None:
    def settings(**env: str) -> Settings:
        return Settings.load(env=env)

    assert _default_concurrency(settings()) == 1  # offline: CPU-bound
    assert _default_concurrency(settings(OPENAI_BASE_URL="http://127.0.0.1:8080/v1")) == 1
    assert _default_concurrency(settings(OPENAI_BASE_URL="http://localhost:11434/v1")) == 1
    assert _default_concurrency(settings(OPENAI_API_KEY="sk-test")) == 8
    assert _default_concurrency(settings(OPENAI_BASE_URL="https://api.example.org/v1")) == 8


async def test_the_calls_of_a_run_that_failed_are_still_counted(own_sample_index_dir: Path) -> None:
    """crag eval once left out the calls and tokens of runs that timed out: their budgets count them."""
    from support.workflow import NeverAnswers
    from workflows.errors import WorkflowTimeoutError

    with LoopbackServer(as_a_model_server(lambda p: "9")) as server:
        settings = Settings.load(env={"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-test"},
                                 index={"path": own_sample_index_dir}, run={"timeout": 2.0})
        workflow = crag.build_workflow(settings, synthesizer=NeverAnswers())
        with watching() as budgets:
            with pytest.raises(WorkflowTimeoutError):
                await workflow.run(query=WARRANTY)
    cost = spent(budgets)
    assert cost.calls == len(server.requests_to("/chat/completions")) > 0
    assert cost.tokens_in == sum(len(message_text(r).split()) for r in server.requests_to("/chat/completions"))
