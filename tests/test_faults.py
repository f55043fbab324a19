"""Faults at the model server and at Tavily, injected by loopback servers on 127.0.0.1.

Each run either answers, with `degraded` saying which fallback stood in and why, or fails
with one clear error; it never hangs and never shows a raw traceback. Retries are bounded:
the servers count the attempts. Nothing of crag is mocked.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

import pytest
from support.corpus import ingested
from support.loopback import (
    Drop,
    LoopbackServer,
    Reply,
    Stall,
    Truncated,
    chat_completion,
    flaky,
    message_text,
    openai_chat,
    tavily_result,
    tavily_search,
)
from support.paths import BENCHMARKS
from support.waiting import finishes
from support.workflow import NeverAnswers
from workflows.errors import WorkflowTimeoutError

import crag
from crag.app.cli import main
from crag.steps.web_search import TavilySearch

QUESTION = "How long does the Zephyr battery last?"  # answered by the documents
WEB_QUESTION = "Who painted the Mona Lisa?"  # not: the verdict is Incorrect, so Tavily is asked
MODEL = "loopback-model"
DOCS = {
    "battery.md": "# Battery\nThe Zephyr drone battery lasts 42 minutes per charge.\n",
    "charger.md": "# Charger\nThe Zephyr charger fills an empty battery in about two hours.\n",
    "camera.md": "# Camera\nThe Zephyr camera records 4K video at 60 frames per second.\n",
}
MONA_LISA = tavily_result(
    "Mona Lisa", "https://example.org/mona-lisa", "The Mona Lisa was painted by Leonardo da Vinci."
)


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("faults")
    ingested(root, DOCS)
    (root / "web.jsonl").write_text(
        json.dumps({"doc_id": "mona-lisa", "title": "Mona Lisa", "url": MONA_LISA["url"], "text": MONA_LISA["content"]})
        + "\n",
        encoding="utf-8",
    )
    return root / "index"


def web_corpus(index_dir: Path) -> Path:
    """A one-page stand-in for the web, searched offline (`LocalCorpusSearch`)."""
    return index_dir.parent / "web.jsonl"


@pytest.fixture(scope="module", autouse=True)
def warm(index_dir: Path) -> None:
    """One healthy run first: it loads the models, the sentence tables and the openai
    client, so the time limits below measure fault handling, not first use."""
    with LoopbackServer(openai_chat(model_reply)) as server:
        asyncio.run(ask_llm(server, index_dir))


def model_reply(prompt: str) -> str:
    """A healthy model: battery chunks rated 9, others 1; a keyword rewrite; a cited answer."""
    if "Rate how relevant the document is" in prompt:
        document = prompt.split("Document:", 1)[1].split("Rate how relevant", 1)[0]
        return "9" if "battery" in document.lower() else "1"
    if prompt.startswith("Rewrite the question"):
        return "zephyr battery life"
    return "It lasts 42 minutes [1]."


async def ask_llm(
    server: LoopbackServer, index_dir: Path, question: str = QUESTION, **env: str
) -> crag.CragResult:
    """Ask with every LLM component at `server`, and the offline stand-in for the web."""
    settings = crag.Settings.load(
        env={"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-test", "OPENAI_MODEL": MODEL, **env},
        index={"path": index_dir},
        web_search={"corpus": web_corpus(index_dir)},
    )
    return await crag.build_workflow(settings).run(query=question)


def web_workflow(server: LoopbackServer, index_dir: Path, **env: str) -> crag.CorrectiveRAGWorkflow:
    """Offline components, with Tavily at `server`."""
    settings = crag.Settings.load(
        env={"TAVILY_API_KEY": "tvly-test", "CRAG_WEB_SEARCH__BASE_URL": server.url, **env},
        index={"path": index_dir},
    )
    return crag.build_workflow(settings)


def grading(request) -> bool:  # noqa: ANN001 - a loopback Request
    """A grading call: the run waits for every one of them (it need not wait for the
    speculative rewrite, whose retry a Correct run may cancel by finishing first)."""
    return "Rate how relevant the document is" in message_text(request)


def attempts_per_request(server: LoopbackServer) -> Counter:
    """How many times each distinct request body arrived."""
    return Counter(r.raw for r in server.requests)


def retried_pair(server: LoopbackServer) -> tuple:
    """The two arrivals of the one request that was sent twice."""
    (body,) = [b for b, n in attempts_per_request(server).items() if n == 2]
    return tuple(r for r in server.requests if r.raw == body)


# --- the model server ---------------------------------------------------------------------------

OPENAI_500 = Reply(500, {"error": {"message": "overloaded", "type": "server_error"}}, {"retry-after-ms": "10"})

LLM_FAULTS = [
    # fault, max_retries, attempts per call, the error type, a detail of the message.
    # Connection faults are retried too (see the transient test below); here they run
    # without retries, since the client's backoff cannot be shortened and costs ~0.5 s.
    pytest.param(OPENAI_500, 1, 2, "InternalServerError", "overloaded", id="http-500"),
    pytest.param(Drop(reset=True), 0, 1, "APIConnectionError", "Connection error", id="connection-reset"),
    pytest.param(Drop(), 0, 1, "APIConnectionError", "Connection error", id="hang-up-without-answer"),
    pytest.param(Stall(10), 0, 1, "APITimeoutError", "timed out", id="no-answer-within-timeout"),
    pytest.param(
        Truncated(Reply(200, chat_completion("9", model=MODEL)), keep=40),
        0, 1, "APIConnectionError", "Connection error", id="body-cut-short",
    ),
    pytest.param(
        Reply(200, '{"id": "chatcmpl-1", "choices": [{"mess', {"Content-Type": "application/json"}),
        1, 1, "ModelReplyError", "not valid JSON", id="truncated-json",
    ),
    pytest.param(
        Reply(200, "<html>502 Bad Gateway</html>", {"Content-Type": "application/json"}),
        1, 1, "ModelReplyError", "not valid JSON", id="malformed-json",
    ),
    pytest.param(
        Reply(200, {"id": "chatcmpl-1", "object": "chat.completion", "model": MODEL}),
        1, 1, "ModelReplyError", "not a chat completion", id="no-choices",
    ),
    pytest.param(
        Reply(200, {**chat_completion("x", model=MODEL), "choices": []}),
        1, 1, "ModelReplyError", "not a chat completion", id="empty-choices",
    ),
    pytest.param(
        Reply(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}),
        1, 1, "AuthenticationError", "Incorrect API key", id="http-401-not-retried",
    ),
]


@pytest.mark.parametrize(("fault", "retries", "attempts", "error", "detail"), LLM_FAULTS)
async def test_a_faulty_model_server_degrades_every_llm_step_with_bounded_attempts(
    index_dir: Path, fault: object, retries: int, attempts: int, error: str, detail: str
) -> None:
    """Grades fall back to the lexical evaluator, the rewrite to keywords, the answer to the
    extractive synthesizer; every call is tried 1 + max_retries times at most.

    The question is not about the documents, so the run needs the rewrite (for its web
    search) and waits for it: every LLM step's failure is in the result."""
    with LoopbackServer(lambda request: fault) as server:
        result = await finishes(ask_llm(
            server, index_dir, WEB_QUESTION, CRAG_LLM__MAX_RETRIES=str(retries), CRAG_LLM__TIMEOUT="0.3"
        ))

    tries = attempts_per_request(server)
    assert len(tries) == len(result.grades) + 2, "one request per chunk grade, the rewrite and the answer"
    assert set(tries.values()) == {attempts}
    degraded = dict(entry.split(": ", 1) for entry in result.degraded)
    assert set(degraded) == {"grade", "rewrite", "synthesize"}
    assert all(error in reason for reason in degraded.values()), degraded
    # The answer is streamed: a reply that is no stream of chunks says so in its own words.
    assert detail in degraded["rewrite"]
    assert detail in degraded["synthesize"] or "streamed reply held no content" in degraded["synthesize"]
    assert all(g.grader == "lexical" and error in g.note for g in result.grades)
    assert result.verdict is crag.Verdict.INCORRECT
    assert result.rewritten_query == "painted mona lisa", "the keyword rewrite"
    assert result.answer == "The Mona Lisa was painted by Leonardo da Vinci. [1]", "the extractive answer"


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(OPENAI_500, id="http-500"),
        pytest.param(Drop(reset=True), id="connection-reset"),
        pytest.param(Truncated(Reply(200, chat_completion("9", model=MODEL)), keep=40), id="body-cut-short"),
    ],
)
async def test_a_transient_model_fault_is_retried_and_leaves_no_trace_in_the_answer(
    index_dir: Path, fault: object
) -> None:
    with LoopbackServer(flaky([fault], openai_chat(model_reply), when=grading)) as server:
        result = await ask_llm(server, index_dir, CRAG_LLM__MAX_RETRIES="1")

    assert result.degraded == []
    assert sorted(attempts_per_request(server).values()) == [1] * (len(result.grades) + 1) + [2]
    assert result.answer == "It lasts 42 minutes [1]."


async def test_a_429_with_retry_after_is_waited_out_and_then_the_call_succeeds(index_dir: Path) -> None:
    limited = Reply(429, {"error": {"message": "Rate limit reached", "type": "requests"}}, {"Retry-After": "1"})
    with LoopbackServer(flaky([limited], openai_chat(model_reply), when=grading)) as server:
        result = await ask_llm(server, index_dir, CRAG_LLM__MAX_RETRIES="2")

    first, again = retried_pair(server)
    assert again.started - first.finished >= 0.95, "the retry came before Retry-After said"
    assert result.degraded == []
    assert len(server.requests) == len(result.grades) + 2 + 1


async def test_max_retries_bounds_the_attempts_of_every_model_call(index_dir: Path) -> None:
    """One layer of retries: llama-index's own retry loop around the client's would make
    it (1 + n) * n attempts, with 1-20 s waits between its rounds."""
    with LoopbackServer(lambda request: OPENAI_500) as server:
        result = await ask_llm(server, index_dir, WEB_QUESTION, CRAG_LLM__MAX_RETRIES="3")

    assert set(attempts_per_request(server).values()) == {4}
    assert len(result.degraded) == 3


async def test_a_model_call_that_outlasts_the_timeout_is_abandoned_at_the_timeout(index_dir: Path) -> None:
    """The server would answer after 5 s; each call gives up at [llm] timeout (0.3 s)."""
    with LoopbackServer(lambda request: Stall(5, then=Reply(200, chat_completion("9", model=MODEL)))) as server:
        # Ending before the server's 5 s answer at all means every call was abandoned.
        result = await finishes(ask_llm(server, index_dir, CRAG_LLM__MAX_RETRIES="0", CRAG_LLM__TIMEOUT="0.3"),
                                within=4.5)

    assert all("Timeout" in g.note for g in result.grades)
    assert {"grade", "synthesize"} <= {entry.split(":")[0] for entry in result.degraded}
    assert len(server.requests) == len(result.grades) + 2  # no retries asked, none made


# --- Tavily --------------------------------------------------------------------------------------

WEB_FAULTS = [
    # fault, attempts with max_retries = 1, a detail of the message
    pytest.param(Reply(500, {"detail": {"error": "internal"}}), 2, "500 Server Error", id="http-500"),
    pytest.param(Drop(reset=True), 2, "hung up without answering, 2 attempt(s)", id="connection-reset"),
    pytest.param(Stall(10), 2, "no answer within 0.3 s per attempt, 2 attempt(s)", id="no-answer-within-timeout"),
    pytest.param(Truncated(Reply(200, {"results": [MONA_LISA]}), keep=30), 1, "cut off", id="body-cut-short"),
    pytest.param(
        Reply(200, '{"query": "mona lisa", "results": [{"ti', {"Content-Type": "application/json"}),
        1, "the answer is not JSON", id="truncated-json",
    ),
    pytest.param(Reply(200, {"query": "mona lisa", "answer": None}), 1, "no 'results' list", id="no-results"),
    pytest.param(
        Reply(200, {"results": [{"title": "Mona Lisa", "url": "https://example.org"}]}),
        1, "result 1 of the answer has no 'content'", id="result-without-content",
    ),
    pytest.param(
        Reply(401, {"detail": {"error": "Unauthorized: missing or invalid API key."}}),
        1, "invalid API key", id="http-401-not-retried",
    ),
    pytest.param(
        Reply(429, {"detail": {"error": "Rate limited"}}, {"Retry-After": "3600"}),
        1, "asks to wait 3600 s", id="retry-after-longer-than-crag-waits",
    ),
]


@pytest.mark.parametrize(("fault", "attempts", "detail"), WEB_FAULTS)
async def test_a_faulty_tavily_degrades_the_web_search_to_internal_knowledge(
    index_dir: Path, fault: object, attempts: int, detail: str
) -> None:
    with LoopbackServer(lambda request: fault) as server:
        workflow = web_workflow(server, index_dir, CRAG_WEB_SEARCH__MAX_RETRIES="1", CRAG_WEB_SEARCH__TIMEOUT="0.3")
        result = await finishes(workflow.run(query=WEB_QUESTION))

    assert len(server.requests) == attempts
    assert result.verdict is crag.Verdict.INCORRECT
    (entry,) = result.degraded
    assert entry.startswith("web_search: web search failed (SearchError: Tavily search failed: ")
    assert detail in entry and entry.endswith("answered from internal knowledge")
    assert result.answer.strip() and all(s.kind == "internal" for s in result.sources)


async def test_a_tavily_429_with_retry_after_is_waited_out_and_then_the_search_succeeds(index_dir: Path) -> None:
    limited = Reply(429, {"detail": {"error": "Rate limited"}}, {"Retry-After": "1"})
    with LoopbackServer(flaky([limited], tavily_search([MONA_LISA]))) as server:
        result = await web_workflow(server, index_dir).run(query=WEB_QUESTION)

    first, again = server.requests
    assert again.started - first.finished >= 0.95, "the retry came before Retry-After said"
    assert result.degraded == []
    assert "Leonardo da Vinci" in result.answer and result.sources[0].url == MONA_LISA["url"]


async def test_a_tavily_call_that_outlasts_the_timeout_is_abandoned_at_the_timeout() -> None:
    with LoopbackServer(lambda request: Stall(5, then=Reply(200, {"results": []}))) as server:
        searcher = TavilySearch("tvly-test", base_url=server.url, timeout=0.3, max_retries=0)
        with pytest.raises(crag.SearchError, match=r"no answer within 0\.3 s per attempt, 1 attempt"):
            await finishes(searcher.search("mona lisa"), within=4.5)  # the server answers at 5 s

    assert len(server.requests) == 1


# --- the whole run --------------------------------------------------------------------------------


async def test_a_component_that_never_returns_is_cancelled_at_the_run_timeout(index_dir: Path) -> None:
    settings = crag.Settings.load(env={}, index={"path": index_dir}, run={"timeout": 0.5})
    workflow = crag.build_workflow(settings, synthesizer=NeverAnswers())
    with pytest.raises(WorkflowTimeoutError, match="synthesize"):
        await finishes(workflow.run(query=QUESTION))  # it never answers: only the timeout ends the run


def test_a_stalled_model_server_ends_at_the_runs_deadline_and_the_offline_components_answer(
    index_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The model server never answers within its own timeout (30 s); [run] timeout is 2 s, of
    which 1 s is kept for the offline components: every model call ends at the deadline, and
    the run answers with exit 0, saying what the deadline ended (issue 31)."""
    monkeypatch.chdir(tmp_path)  # no crag.toml
    with LoopbackServer(lambda request: Stall(30)) as server:
        env = {"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-test", "CRAG_LLM__TIMEOUT": "30",
               "CRAG_LLM__MAX_RETRIES": "0", "CRAG_RUN__TIMEOUT": "2", "CRAG_RUN__FALLBACK_SECONDS": "1"}
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        code = main(["ask", QUESTION, "--index", str(index_dir), "--json", "-q"])

    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["answer"].strip()
    degraded = "\n".join(result["degraded"])
    assert "DeadlineReached" in degraded and "deadline:" in degraded
    assert len(server.requests) >= 1


def test_the_cli_ends_a_stalled_web_search_at_the_runs_deadline_and_answers_from_the_documents(
    index_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Tavily never answers within its own timeout (30 s); [run] timeout is 1 s. The search
    ends at the run's deadline (the timeout less what the offline components need), and the
    command answers from the user's documents, saying why, instead of waiting for the stall."""
    monkeypatch.chdir(tmp_path)  # no crag.toml
    with LoopbackServer(lambda request: Stall(30)) as server:
        env = {"TAVILY_API_KEY": "tvly-test", "CRAG_WEB_SEARCH__BASE_URL": server.url,
               "CRAG_WEB_SEARCH__TIMEOUT": "30", "CRAG_WEB_SEARCH__MAX_RETRIES": "0"}
        for name, value in {**env, "CRAG_RUN__TIMEOUT": "1"}.items():
            monkeypatch.setenv(name, value)
        code = main(["ask", WEB_QUESTION, "--index", str(index_dir), "--quiet"])

    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in out + err
    assert "the run's deadline ended the web search after" in out + err
    assert len(server.requests) >= 1


# --- load ------------------------------------------------------------------------------------------


def test_twenty_concurrent_queries_against_faulty_servers_all_end_answered_or_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """benchmarks/load.py, small: one workflow, 20 concurrent runs, 30% of calls faulty."""
    benchmarks = BENCHMARKS
    monkeypatch.syspath_prepend(str(benchmarks))  # the server processes import `load` by name
    spec = importlib.util.spec_from_file_location("load", benchmarks / "load.py")
    load = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "load", load)
    spec.loader.exec_module(load)

    report = asyncio.run(load.run_load(20, fault_rate=0.3, seed=3, timeout=0.3, run_timeout=20, budget=60))

    assert report.unhandled == []
    assert report.answered + sum(report.errors.values()) == 20
    assert report.faults > 0 and report.llm_requests > report.faults
    assert report.wall < 30
