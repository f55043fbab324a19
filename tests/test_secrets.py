"""API keys never leave crag in anything meant for people or for other programs: not in
the printed answer or `--json`, the saved trace, the pictures drawn from it, log records
at DEBUG, instrumentation events, error messages or tracebacks, even when a failing
server echoes the key back in its error body.

The planted keys are deliberately not shaped like OpenAI's or Tavily's (`sk-...`,
`tvly-...`), so that they are caught because crag knows them, not by their look.
"""

from __future__ import annotations

import json
import logging
import traceback
from pathlib import Path

import pytest
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.llms import ChatMessage
from support.corpus import ingested
from support.loopback import LoopbackServer, Reply, chat_completion, message_text, openai_chat

import crag
from crag.app.cli import main
from crag.errors import REDACTED
from crag.models import LLMOptions, openai_llm
from crag.steps.web_search import TavilySearch

OPENAI_KEY = "PLANTED.openai.7f3a9c1e5b2d"
TAVILY_KEY = "PLANTED.tavily.2d8e4b6a0c9f"
KEYS = (OPENAI_KEY, TAVILY_KEY)
QUESTION = "How long does the Zephyr battery last?"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ingested(tmp_path_factory.mktemp("secrets"), {
        "battery.md": "# Battery\nThe Zephyr drone battery lasts 42 minutes.\n",
        "camera.md": "# Camera\nThe Zephyr camera records 4K video.\n",
    })


def leaky_model(request) -> Reply:  # noqa: ANN001 - a loopback Request
    """Grades 5/10 (Ambiguous: internal knowledge and the web); the rewrite is refused with a
    401 that quotes the Authorization header, the answer with a 500 that quotes the key."""
    prompt = message_text(request)
    if "Rate how relevant the document is" in prompt:
        return Reply(200, chat_completion("5", model="loopback"))
    if prompt.startswith("Rewrite the question"):
        echo = request.headers.get("authorization", "")
        return Reply(401, {"error": {"message": f"Incorrect API key provided: {echo}", "type": "auth"}})
    key = request.headers.get("authorization", "").removeprefix("Bearer ")
    return Reply(500, {"error": {"message": f"upstream refused key {key}"}}, {"retry-after-ms": "1"})


def leaky_tavily(request) -> Reply:  # noqa: ANN001
    echo = request.headers.get("authorization", "")
    return Reply(401, {"detail": {"error": f"Unauthorized: invalid API key {echo}"}})


class EventRecorder(BaseEventHandler):
    """Every llama-index instrumentation event, as an observability integration gets it."""

    events: list = []

    @classmethod
    def class_name(cls) -> str:
        return "EventRecorder"

    def handle(self, event: BaseEvent, **kwargs: object) -> None:
        self.events.append(event)


@pytest.fixture
def recorded_events():  # noqa: ANN201
    recorder = EventRecorder(events=[])
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(recorder)
    yield recorder.events
    dispatcher.event_handlers.remove(recorder)


def test_no_artefact_of_a_run_against_key_echoing_servers_contains_a_key(
    index_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    recorded_events: list,
) -> None:
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.DEBUG)
    with LoopbackServer(leaky_model) as llm, LoopbackServer(leaky_tavily) as web:
        for name, value in {
            "OPENAI_API_KEY": OPENAI_KEY,
            "OPENAI_BASE_URL": llm.url + "/v1",
            "TAVILY_API_KEY": TAVILY_KEY,
            "CRAG_WEB_SEARCH__BASE_URL": web.url,
            "CRAG_WEB_SEARCH__MAX_RETRIES": "0",
            "CRAG_LLM__MAX_RETRIES": "1",
        }.items():
            monkeypatch.setenv(name, value)
        trace = tmp_path / "run.json"
        assert main(["ask", QUESTION, "--index", str(index_dir), "--json", "--trace", str(trace)]) == 0
        assert main(["ask", QUESTION, "--index", str(index_dir)]) == 0  # the plain-text answer too
        assert main(["draw", "--trace", str(trace), "--out", str(tmp_path / "run.html")]) == 0
        assert main(["draw", "--trace", str(trace), "--format", "mermaid", "--out", str(tmp_path / "run.mmd")]) == 0

    # The servers did get the keys, and echoed them in their errors ...
    assert {r.headers["authorization"] for r in llm.requests} == {f"Bearer {OPENAI_KEY}"}
    assert {r.headers["authorization"] for r in web.requests} == {f"Bearer {TAVILY_KEY}"}
    captured = capsys.readouterr()
    result = json.loads(captured.out.splitlines()[0])
    degraded = " ".join(result["degraded"])
    assert "rewrite:" in degraded and "web_search:" in degraded and "synthesize:" in degraded
    assert degraded.count(REDACTED) >= 3, "each echo was seen, and redacted"

    # ... and no artefact shows them.
    artefacts = {
        "stdout": captured.out,
        "stderr": captured.err,
        "trace": trace.read_text(encoding="utf-8"),
        "html": (tmp_path / "run.html").read_text(encoding="utf-8"),
        "mermaid": (tmp_path / "run.mmd").read_text(encoding="utf-8"),
        "logs": caplog.text,
        "log records": "\n".join(f"{r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in caplog.records),
        "instrumentation events": "\n".join(str(e.model_dump()) for e in recorded_events),
    }
    assert recorded_events and caplog.records, "the recorders saw the run"
    for where, text in artefacts.items():
        for key in KEYS:
            assert key not in text, f"the key {key} appears in the {where}"


async def test_a_search_error_shows_no_key_not_even_in_its_traceback() -> None:
    with LoopbackServer(leaky_tavily) as server:
        with pytest.raises(crag.SearchError) as caught:
            await TavilySearch(TAVILY_KEY, base_url=server.url, max_retries=0).search("mona lisa")

    assert "invalid API key" in str(caught.value)
    shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value)
    assert TAVILY_KEY not in shown and REDACTED in shown


async def test_a_model_error_shows_no_key_not_even_in_its_traceback() -> None:
    with LoopbackServer(leaky_model) as server:
        llm = openai_llm(LLMOptions(api_key=OPENAI_KEY, base_url=server.url + "/v1", max_retries=0))
        with pytest.raises(Exception) as caught:  # noqa: PT011 - the openai SDK's own error type
            await llm.achat([ChatMessage(role="user", content="Rewrite the question\nQuestion: x")])

    assert type(caught.value).__name__ == "AuthenticationError"
    shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value) + str(caught.value.body)
    assert OPENAI_KEY not in shown and REDACTED in shown


def test_the_model_object_does_not_show_its_key() -> None:
    llm = openai_llm(LLMOptions(api_key=OPENAI_KEY, base_url="http://127.0.0.1:9/v1"))
    assert llm.api_key == OPENAI_KEY  # it still has it, to send
    for shown in (repr(llm), str(llm), str(llm.to_dict()), llm.to_json(), str(llm.model_dump())):
        assert OPENAI_KEY not in shown


async def test_a_key_shaped_token_crag_was_never_given_is_redacted_too(index_dir: Path) -> None:
    """A proxy may answer with some other key in its error; anything shaped like one goes."""
    stranger = "sk-proj-Zx81StrangerKeyNotOurs0042"

    def proxy(prompt: str) -> Reply | str:
        return Reply(403, {"error": {"message": f"key {stranger} is disabled"}}) if prompt.startswith("Rewrite") else "5"

    with LoopbackServer(openai_chat(proxy)) as server:
        settings = crag.Settings.load(
            env={"OPENAI_BASE_URL": server.url + "/v1", "CRAG_LLM__MAX_RETRIES": "0"},
            index={"path": index_dir},
            synthesizer={"kind": "extractive"},
        )
        result = await crag.build_workflow(settings).run(query=QUESTION)

    (rewrite,) = [d for d in result.degraded if d.startswith("rewrite:")]
    assert "PermissionDeniedError" in rewrite and REDACTED in rewrite and stranger not in rewrite
    assert stranger not in result.trace.model_dump_json()


def test_an_error_line_from_the_cli_shows_no_key(
    index_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A component that fails with no fallback: its error reaches the command's one line."""

    class KeyQuotingRetriever:
        async def retrieve(self, query: str) -> list:
            raise RuntimeError(f"vector store rejected credentials {OPENAI_KEY}")

    import crag.workflows.factory

    real_build = crag.workflows.factory.build_workflow
    monkeypatch.setattr(
        crag.workflows.factory, "build_workflow", lambda settings, **kw: real_build(settings, retriever=KeyQuotingRetriever())
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert main(["ask", QUESTION, "--index", str(index_dir), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error: step 'retrieve' failed: RuntimeError: vector store rejected")
    assert OPENAI_KEY not in err and REDACTED in err
