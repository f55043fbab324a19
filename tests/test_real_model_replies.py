"""A real small model's own replies, replayed: SmolLM2-135M-Instruct under llama.cpp's server,
recorded on the sample handbook by `benchmarks/real_model.py --set sample --record`.

Not the replies we expect: "The document is 10.", "The document is irrelevant to 10" cut at its
limit, a rewrite that answers instead of asking, an answer that rambles. The replay server
answers each request with the next recorded reply for the same purpose (told by its
`max_tokens`, one per purpose), ending it as the real server did, and, as llama.cpp did, sends
no usage in a stream.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from support.loopback import LoopbackServer, Reply, chat_completion, message_text, stream_chunks
from support.paths import DATA, SAMPLES

from crag.app.cli import DEMO_QUESTIONS, main
from crag.config import Settings

RECORDED = json.loads((DATA / "real_model_replies.json").read_text(encoding="utf-8"))


def replay() -> LoopbackServer:
    limits = Settings.load(env={}).llm
    purpose_of = {limits.max_tokens_grade: "grade", limits.max_tokens_batch_grade: "batch grade",
                  limits.max_tokens_rewrite: "rewrite", limits.max_tokens_condense: "condense",
                  limits.max_tokens_decompose: "decompose", limits.max_tokens_answer: "answer"}
    replies = {purpose: itertools.cycle([c["reply"] for c in RECORDED["calls"] if c["purpose"] == purpose])
               for purpose in {c["purpose"] for c in RECORDED["calls"]}}

    def handle(request) -> Reply:  # noqa: ANN001 - loopback's Request
        body = request.json or {}
        reply = next(replies[purpose_of.get(body.get("max_tokens"), "answer")])
        content, finish = reply["content"] or "", reply["finish_reason"] or "stop"
        if body.get("stream"):
            return stream_chunks(content, model=RECORDED["model"], prompt_text=message_text(request),
                                 usage=False, finish_reason=finish)
        return Reply(200, chat_completion(content, model=RECORDED["model"], prompt_text=message_text(request),
                                          finish_reason=finish))

    return LoopbackServer(handle)


def test_the_recording_holds_the_replies_that_broke_crag() -> None:
    grades = [c["reply"] for c in RECORDED["calls"] if c["purpose"] == "grade"]
    assert len(RECORDED["calls"]) >= 30 and len(grades) >= 20
    assert any(g["content"].strip() == "The document is 10." for g in grades)  # a number, inside prose
    assert any(g["finish_reason"] == "length" for g in grades)  # cut at the grade's limit


@pytest.mark.parametrize("question", DEMO_QUESTIONS)
def test_the_demo_answers_on_a_real_small_models_replies_and_takes_no_grade_from_its_prose(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, own_sample_index_dir: Path,
    question: str,
) -> None:
    with replay() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        code = main(["ask", question, "--index", str(own_sample_index_dir),
                     "--web-corpus", str(SAMPLES / "web.jsonl"), "--json", "-q"])
        result = json.loads(capsys.readouterr().out)
        requests = server.requests_to("/chat/completions")
    assert code == 0 and result["answer"].strip()
    # SmolLM2 never gave a grade alone: every chunk was graded offline, and says why.
    assert result["grades"] and all(g["grader"] == "lexical" and g["note"] for g in result["grades"])
    assert any(note.startswith("grade: ") for note in result["degraded"])
    assert result["cost"]["calls"] == len(requests) > 0
    assert result["cost"]["estimated"]  # its streamed answer came without usage: counted here


async def test_the_openai_door_and_mcp_say_the_cost_of_a_real_small_models_run(
    own_sample_index_dir: Path, tmp_path: Path,
) -> None:
    """Every call counted through every door, and the estimated tokens marked as such."""
    import httpx
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from support.loopback import uvicorn_serving

    from crag.app.server import build_server

    with replay() as model:
        settings = Settings.load(
            env={"OPENAI_BASE_URL": model.url + "/v1", "OPENAI_API_KEY": "sk-test"},
            index={"path": own_sample_index_dir}, web_search={"corpus": SAMPLES / "web.jsonl"},
            server={"store": str(tmp_path / "runs.db")},
        )
        with uvicorn_serving(build_server(settings).app) as url:
            async with httpx.AsyncClient(base_url=url, timeout=120) as http:
                reply = (await http.post("/v1/chat/completions", json={
                    "model": "crag", "messages": [{"role": "user", "content": DEMO_QUESTIONS[0]}]})).json()
            before = len(model.requests_to("/chat/completions"))
            async with httpx2.AsyncClient(timeout=120) as http2, \
                    Client(streamable_http_client(f"{url}/mcp", http_client=http2)) as client:
                asked = (await client.call_tool("ask", {"question": DEMO_QUESTIONS[1]})).structured_content
            after = len(model.requests_to("/chat/completions"))
    door = reply["crag"]["cost"]
    assert door["calls"] == before > 0 and door["estimated"]
    assert reply["usage"]["total_tokens"] == door["tokens_in"] + door["tokens_out"]
    assert asked["cost"]["calls"] == after - before > 0 and asked["cost"]["estimated"]
    assert any(note.startswith("grade: ") for note in reply["crag"]["degraded"] + asked["degraded"])
