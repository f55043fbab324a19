"""The OpenAI-compatible door, driven by the official `openai` client over loopback against
a real uvicorn server on the sample index."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from support.loopback import uvicorn_serving
from support.paths import SAMPLES
from support.serving import running, server_with
from support.waiting import wait_for
from support.workflow import GatedGrader

from crag import Settings
from crag.config import CacheSettings

QUESTION = "What warranty does Lumen give on the Helio H10?"
KEY = "sk-test-crag-door"


def _settings(index_dir: Path, store: Path, **server: object) -> Settings:
    return Settings.load(env={}, index={"path": index_dir}, web_search={"corpus": SAMPLES / "web.jsonl"},
                         server={"store": str(store), **server})


@pytest.fixture(scope="module")
def base_url(sample_index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server for the module: SQLite store, an API key, small bodies only."""
    store = tmp_path_factory.mktemp("openai") / "runs.db"
    with running(_settings(sample_index_dir, store, api_key=KEY, max_body_bytes=20_000)) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=KEY, max_retries=0, timeout=60)


def recorded(base_url: str, handler_id: str) -> dict:
    """The run's result as the store recorded it (its row may say `running` for a moment
    after the stream's last event)."""
    for _ in range(200):
        handler = httpx.get(f"{base_url}/handlers/{handler_id}", headers={"Authorization": f"Bearer {KEY}"}).json()
        if handler["status"] != "running":
            return handler["result"]["value"]["result"]
        time.sleep(0.05)
    raise AssertionError(f"the run {handler_id} is still running")


def ask(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def test_models_lists_crag(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["crag"]


def test_a_whole_answer_is_cited_and_ends_with_its_sources(client: openai.OpenAI, base_url: str) -> None:
    reply = client.chat.completions.create(model="crag", messages=ask(QUESTION))
    content = reply.choices[0].message.content
    assert reply.object == "chat.completion" and reply.model == "crag"
    assert reply.choices[0].finish_reason == "stop"
    answer, _, sources = content.partition("\n\nSources:\n")
    assert "12-year warranty" in answer and "[1]" in answer and sources.startswith("[1] ")
    crag = reply.model_extra["crag"]
    assert crag["verdict"] == "correct" and crag["sources"][0]["number"] == 1
    assert crag["trace_url"] == f"{base_url}/handlers/{crag['handler_id']}/trace"
    assert recorded(base_url, crag["handler_id"])["answer"] == answer
    page = httpx.get(crag["trace_url"], headers={"Authorization": f"Bearer {KEY}"})
    assert page.status_code == 200 and "<svg" in page.text  # the run was recorded like any other


def test_a_streamed_answer_arrives_in_chunks_with_usage_last(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(
        model="crag", messages=ask(QUESTION), stream=True, stream_options={"include_usage": True}
    ))
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    whole = client.chat.completions.create(model="crag", messages=ask(QUESTION)).choices[0].message.content
    assert len(texts) >= 3 and "".join(texts) == whole  # at least two sentences, then the sources
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[-2].choices[0].finish_reason == "stop" and chunks[-2].model_extra["crag"]["verdict"] == "correct"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(c.usage is None for c in chunks[:-1])


def test_the_stream_ends_with_done(base_url: str) -> None:
    body = {"model": "crag", "messages": ask(QUESTION), "stream": True}
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {KEY}"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)


def test_a_follow_up_is_made_standalone_and_recorded(client: openai.OpenAI, base_url: str) -> None:
    first = client.chat.completions.create(model="crag", messages=ask(QUESTION)).choices[0].message.content
    reply = client.chat.completions.create(model="crag", messages=[
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "What battery does it use?"},
    ])
    crag = reply.model_extra["crag"]
    assert crag["question"] == "What battery does the Helio H10 use?" and crag["asked"] == "What battery does it use?"
    assert "LFP" in reply.choices[0].message.content
    trace = recorded(base_url, crag["handler_id"])["trace"]
    assert trace["query"] == "What battery does the Helio H10 use?" and trace["asked"] == "What battery does it use?"


@pytest.mark.parametrize(("body", "status", "param", "code"), [
    ({"model": "crag", "messages": []}, 400, "messages", None),
    ({"model": "crag"}, 400, "messages", None),
    ({"model": "crag", "messages": "hello"}, 400, "messages", None),
    ({"model": "crag", "messages": [{"role": "user", "content": 7}]}, 400, "messages[0].content", None),
    ({"model": "crag", "messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages[0].role", None),
    ({"model": "crag", "messages": [{"role": "assistant", "content": "hi"}]}, 400, "messages", None),
    ({"model": "crag", "messages": ask("   ")}, 400, "messages", None),
    ({"model": 3, "messages": ask(QUESTION)}, 400, "model", None),
    ({"model": "crag", "messages": ask(QUESTION), "stream": "yes"}, 400, "stream", None),
    ({"model": "gpt-4o", "messages": ask(QUESTION)}, 404, "model", "model_not_found"),
])
def test_bad_requests_get_openai_shaped_4xx(
    client: openai.OpenAI, body: dict, status: int, param: str, code: str | None
) -> None:
    with pytest.raises(openai.APIStatusError) as caught:  # sent as is: the client checks some itself
        client.post("/chat/completions", body=body, cast_to=object)
    error = caught.value
    assert error.status_code == status
    assert error.body["type"] in ("invalid_request_error",) and error.body["param"] == param
    assert error.body["code"] == code and error.body["message"]


def test_not_json_and_too_large_bodies_are_openai_shaped(base_url: str) -> None:
    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    for door in ("chat/completions", "completions"):
        response = httpx.post(f"{base_url}/v1/{door}", content=b"{not json", headers=auth)
        assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
    big = {"model": "crag", "messages": ask("x" * 30_000)}
    response = httpx.post(f"{base_url}/v1/chat/completions", json=big, headers=auth)
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"


def test_a_missing_or_wrong_key_is_an_openai_shaped_401(base_url: str) -> None:
    for key in ("", "sk-wrong"):
        stranger = openai.OpenAI(base_url=f"{base_url}/v1", api_key=key or "unset", max_retries=0)
        if not key:
            stranger = stranger.with_options(default_headers={"Authorization": ""})
        with pytest.raises(openai.AuthenticationError) as caught:
            stranger.chat.completions.create(model="crag", messages=ask(QUESTION))
        assert caught.value.body["code"] == "invalid_api_key"
    assert httpx.get(f"{base_url}/v1/models").json()["error"]["type"] == "authentication_error"


async def test_a_busy_server_is_an_openai_shaped_503_with_retry_after(sample_index_dir: Path, tmp_path: Path) -> None:
    settings = _settings(sample_index_dir, tmp_path / "s.db", max_runs=1, max_queue=0)
    grader = GatedGrader()
    with uvicorn_serving(server_with(settings, grader).app) as url:
        door = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)
        first = asyncio.create_task(door.chat.completions.create(model="crag", messages=ask(QUESTION)))
        await wait_for(lambda: grader.inside == 1)  # the one slot is held by the first run
        with pytest.raises(openai.APIStatusError) as caught:
            await door.chat.completions.create(model="crag", messages=ask(QUESTION))
        assert caught.value.status_code == 503 and int(caught.value.response.headers["retry-after"]) >= 1
        assert caught.value.body["type"] == "service_unavailable" and "busy" in caught.value.body["message"]
        grader.gate.set()
        assert "12-year" in (await first).choices[0].message.content  # the slot is given back at the end
        again = await door.chat.completions.create(model="crag", messages=ask(QUESTION))
        assert again.model_extra["crag"]["verdict"] == "correct"


def test_a_60_kb_non_ascii_conversation_is_read_as_sent(sample_index_dir: Path, tmp_path: Path) -> None:
    """The cap is on the bytes the client sent: CJK text escaped by a re-send would pass it."""
    earlier = "锂电池的保修期是多久？" * 1_800  # ~59 KB as UTF-8, ~119 KB as \\u escapes
    messages = [{"role": "user", "content": earlier}, {"role": "assistant", "content": "—"}, *ask(QUESTION)]
    with running(_settings(sample_index_dir, tmp_path / "s.db")) as url:
        door = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)
        reply = door.chat.completions.create(model="crag", messages=messages)
    assert reply.model_extra["crag"]["handler_id"]


async def test_a_stream_whose_client_goes_away_cancels_its_run(sample_index_dir: Path, tmp_path: Path) -> None:
    settings = _settings(sample_index_dir, tmp_path / "s.db").model_copy(
        update={"cache": CacheSettings(enabled=False)})  # the gated grader's grades, never read back
    grader = GatedGrader()
    with uvicorn_serving(server_with(settings, grader).app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            body = {"model": "crag", "messages": ask(QUESTION), "stream": True}
            async with http.stream("POST", "/v1/chat/completions", json=body) as reply:
                lines = reply.aiter_lines()  # held: a dropped iterator would close the stream
                first = await lines.__anext__()  # the role chunk: the run has started
                handler_id = first.split('"id": "chatcmpl-', 1)[1].split('"', 1)[0]
                await wait_for(lambda: grader.inside == 1, seconds=120)
            # the client has gone; the run, held in its grading step, is cancelled and recorded so
            deadline = time.monotonic() + 120
            while (status := (await http.get(f"/handlers/{handler_id}")).json()["status"]) == "running":
                assert time.monotonic() < deadline, "the run was not cancelled"
                await asyncio.sleep(0.05)
        grader.gate.set()
    assert status == "cancelled"


def test_the_model_is_retrieved_by_its_id_and_another_id_is_openais_404(client: openai.OpenAI) -> None:
    model = client.models.retrieve("crag")
    assert (model.id, model.object, model.owned_by) == ("crag", "model", "crag")
    assert model.created == next(iter(client.models.list())).created
    for other in ("gpt-4o", "org/some-model"):
        with pytest.raises(openai.NotFoundError) as caught:
            client.models.retrieve(other)
        assert caught.value.body["code"] == "model_not_found" and caught.value.body["param"] == "model"
        assert other in caught.value.body["message"]


@pytest.mark.parametrize(("method", "path", "status", "allow"), [
    ("POST", "/v1/embeddings", 404, None),
    ("GET", "/v1/", 404, None),
    ("DELETE", "/v1/files/file-1", 404, None),
    ("GET", "/v1/chat/completions", 405, "POST"),
    ("POST", "/v1/models", 405, "GET, HEAD"),
    ("DELETE", "/v1/models/crag", 405, "GET, HEAD"),
])
def test_an_unknown_path_or_method_is_openai_shaped(
    base_url: str, method: str, path: str, status: int, allow: str | None
) -> None:
    response = httpx.request(method, f"{base_url}{path}", headers={"Authorization": f"Bearer {KEY}"})
    error = response.json()["error"]
    assert response.status_code == status and response.headers.get("allow") == allow
    assert error["type"] == "invalid_request_error" and error["param"] is None and error["code"] is None
    assert path in error["message"] and method in error["message"]
    if status == 404:
        assert "POST /v1/chat/completions" in error["message"]  # it says what this server does answer


def test_an_unknown_path_without_the_key_is_the_openai_shaped_401(base_url: str) -> None:
    error = httpx.post(f"{base_url}/v1/embeddings", json={}).json()["error"]
    assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"


TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize(("extra", "param", "code"), [
    ({"tools": [TOOL]}, "tools", "unsupported_parameter"),
    ({"functions": [TOOL["function"]]}, "functions", "unsupported_parameter"),
    ({"tool_choice": "required"}, "tool_choice", "unsupported_value"),
    ({"function_call": {"name": "lookup"}}, "function_call", "unsupported_value"),
    ({"response_format": {"type": "json_object"}}, "response_format", "unsupported_value"),
    ({"n": 2}, "n", "unsupported_value"),
    ({"logprobs": True}, "logprobs", "unsupported_value"),
    ({"modalities": ["text", "audio"]}, "modalities", "unsupported_value"),
])
def test_what_crag_cannot_give_is_a_400_naming_the_parameter(
    client: openai.OpenAI, extra: dict, param: str, code: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="crag", messages=ask(QUESTION), **extra)
    assert caught.value.body["param"] == param and caught.value.body["code"] == code
    assert caught.value.body["message"].startswith(f"'{param}': ")


def test_what_asks_for_nothing_more_than_the_answer_is_accepted(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="crag", messages=ask(QUESTION), tools=[], tool_choice="none", response_format={"type": "text"},
        n=1, logprobs=False, temperature=0.2, max_tokens=50,
    )
    assert "12-year" in reply.choices[0].message.content


def test_structured_output_gets_a_clear_error_not_none(client: openai.OpenAI) -> None:
    from pydantic import BaseModel

    class Warranty(BaseModel):
        years: int

    with pytest.raises(openai.BadRequestError) as caught:  # what LangChain's with_structured_output calls
        client.chat.completions.parse(model="crag", messages=ask(QUESTION), response_format=Warranty)
    assert caught.value.body["param"] == "response_format" and "json_schema" in caught.value.body["message"]
    assert "not JSON" in caught.value.body["message"]


def test_a_legacy_completion_answers_the_prompt_as_text(client: openai.OpenAI, base_url: str) -> None:
    reply = client.completions.create(model="crag", prompt=QUESTION)
    chat = client.chat.completions.create(model="crag", messages=ask(QUESTION))
    assert reply.object == "text_completion" and reply.id.startswith("cmpl-") and reply.model == "crag"
    assert reply.choices[0].text == chat.choices[0].message.content and reply.choices[0].finish_reason == "stop"
    crag = reply.model_extra["crag"]
    assert crag["verdict"] == "correct" and reply.id == f"cmpl-{crag['handler_id']}"
    assert recorded(base_url, crag["handler_id"])["query"] == QUESTION  # a run like any other


def test_a_legacy_completion_streams_text_chunks(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(
        model="crag", prompt=[QUESTION], stream=True, stream_options={"include_usage": True}
    ))
    whole = client.completions.create(model="crag", prompt=QUESTION).choices[0].text
    assert all(c.object == "text_completion" for c in chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole
    assert chunks[-2].choices[0].finish_reason == "stop" and chunks[-1].usage is not None


@pytest.mark.parametrize(("body", "status", "param", "code"), [
    ({"model": "crag"}, 400, "prompt", None),
    ({"model": "crag", "prompt": [QUESTION, QUESTION]}, 400, "prompt", None),
    ({"model": "crag", "prompt": [1, 2, 3]}, 400, "prompt", None),
    ({"model": "crag", "prompt": "   "}, 400, "prompt", None),
    ({"model": "crag", "prompt": QUESTION, "echo": True}, 400, "echo", "unsupported_value"),
    ({"model": "crag", "prompt": QUESTION, "best_of": 3}, 400, "best_of", "unsupported_value"),
    ({"model": "crag", "prompt": QUESTION, "suffix": "!"}, 400, "suffix", "unsupported_value"),
    ({"model": "davinci-002", "prompt": QUESTION}, 404, "model", "model_not_found"),
])
def test_bad_legacy_requests_get_openai_shaped_4xx(
    client: openai.OpenAI, body: dict, status: int, param: str, code: str | None
) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        client.post("/completions", body=body, cast_to=object)
    assert caught.value.status_code == status and caught.value.body["type"] == "invalid_request_error"
    assert caught.value.body["param"] == param and caught.value.body["code"] == code
