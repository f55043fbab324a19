"""`crag serve`: the workflow over HTTP, driven over loopback by real clients
(llama-agents-client and httpx) against a real uvicorn server and real stores."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from llama_agents.client import WorkflowClient
from support.serving import ANSWERED, running, server_settings

from crag import Settings
from crag.app.cli import main
from crag.app.server.store import store_for
from crag.errors import ConfigError, redact
from crag.events import CragResult, StepProgressEvent

WEB = "Who invented the lithium-ion battery?"  # the sample 'web' does
POSTGRES_URL = os.environ.get("CRAG_TEST_POSTGRES_URL")


async def _ask_streaming(client: WorkflowClient, question: str) -> tuple[list[StepProgressEvent], CragResult]:
    """Start a run, read its whole event stream, then fetch its handler's result."""
    started = await client.run_workflow_nowait("crag", start_event={"query": question})
    progress = []
    async for envelope in client.get_workflow_events(started.handler_id, after_sequence=-1):
        if envelope.type == "StepProgressEvent":
            progress.append(StepProgressEvent.model_validate(envelope.value))
    handler = await client.get_handler(started.handler_id)
    assert handler.status == "completed", handler.error
    return progress, CragResult.model_validate(handler.result.value["result"])


def _assert_well_ordered(progress: list[StepProgressEvent], result: CragResult) -> None:
    """Every step that ran starts before it finishes, retrieve first and synthesize last,
    and the stream's finished steps are exactly the steps in the result."""
    assert (progress[0].step, progress[0].status) == ("retrieve", "started")
    assert (progress[-1].step, progress[-1].status) == ("synthesize", "finished")
    for step in {p.step for p in progress}:
        statuses = [p.status for p in progress if p.step == step]
        assert statuses == ["started", "finished"], (step, statuses)
    assert sorted(p.step for p in progress if p.status == "finished") == sorted(result.steps)


def test_health_says_what_is_served_without_a_key(base_url: str) -> None:
    reply = httpx.get(f"{base_url}/health")

    assert reply.status_code == 200
    body = reply.json()
    assert body["status"] == "healthy" and body["workflows"] == ["crag"]
    assert body["store"] == "sqlite" and body["auth"] is False
    assert body["index"]["chunks"] > 0 and body["index"]["files"] == 4


async def test_a_run_streams_its_steps_in_order_then_its_result(base_url: str) -> None:
    client = WorkflowClient(base_url=base_url)

    progress, result = await _ask_streaming(client, ANSWERED)

    _assert_well_ordered(progress, result)
    assert result.verdict.value == "correct"
    assert "12-year" in result.answer
    assert result.sources and all(s.kind == "internal" for s in result.sources)


def test_the_waiting_run_route_answers_with_the_result(base_url: str) -> None:
    reply = httpx.post(f"{base_url}/workflows/crag/run", json={"start_event": {"query": WEB}}, timeout=60)

    assert reply.status_code == 200
    result = CragResult.model_validate(reply.json()["result"]["value"]["result"])
    assert result.verdict.value == "incorrect"
    assert "Goodenough" in result.answer
    assert any(s.kind == "web" for s in result.sources)


async def test_concurrent_streamed_runs_each_get_their_own_events_and_result(base_url: str) -> None:
    questions = [ANSWERED, WEB, "How do I reset the Helio H10?", ANSWERED + " Please.", WEB + " Who?", "Mona Lisa painter?"]
    client = WorkflowClient(base_url=base_url)

    runs = await asyncio.gather(*(_ask_streaming(client, q) for q in questions))

    for question, (progress, result) in zip(questions, runs):
        assert result.query == " ".join(question.split())
        _assert_well_ordered(progress, result)
    assert {r.verdict.value for _, r in runs} >= {"correct", "incorrect"}


def test_the_trace_page_draws_a_finished_run(base_url: str) -> None:
    run = httpx.post(f"{base_url}/workflows/crag/run", json={"start_event": {"query": WEB}}, timeout=60).json()

    page = httpx.get(f"{base_url}/handlers/{run['handler_id']}/trace")

    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.text.startswith("<!DOCTYPE html>") or page.text.startswith("<!doctype html>")
    for step in ("retrieve", "grade", "rewrite", "web_search", "refine_web", "synthesize"):
        assert step in page.text
    assert "incorrect" in page.text and "<script" not in page.text


def test_the_trace_of_an_unknown_run_is_a_404(base_url: str) -> None:
    reply = httpx.get(f"{base_url}/handlers/no-such-run/trace")

    assert reply.status_code == 404 and "no-such-run" in reply.json()["detail"]


@pytest.mark.parametrize("question", ["", "   \n\t "])
def test_an_empty_question_is_a_400_and_starts_no_run(base_url: str, question: str) -> None:
    before = len(httpx.get(f"{base_url}/handlers").json()["handlers"])

    for route in ("run", "run-nowait"):
        reply = httpx.post(f"{base_url}/workflows/crag/{route}", json={"start_event": {"query": question}})
        assert reply.status_code == 400
        assert reply.json()["detail"] == "The question is empty; ask something."
    assert len(httpx.get(f"{base_url}/handlers").json()["handlers"]) == before


def test_a_run_without_a_question_is_a_400_naming_the_field(base_url: str) -> None:
    reply = httpx.post(f"{base_url}/workflows/crag/run-nowait", json={"start_event": {"question": "hi"}})

    assert reply.status_code == 400 and "query" in reply.json()["detail"]


@pytest.mark.parametrize(("body", "problem"), [
    (b'{"start_event": {"query": " "}}', "The question is empty; ask something."),
    (b'{"kwargs": {"query": ""}}', "The question is empty; ask something."),
    (b'{"start_event": {"type": "QueryStartEvent", "value": {"query": ""}}}', "The question is empty"),
    (b'{"start_event": "{\\"query\\": \\"\\"}"}', "The question is empty"),
    (b'{"start_event": {"query": "' + b"a " * 5000 + b'"}}', "the limit is"),
    (b'{"start_event": {"query": 3}}', "query: Input should be a valid string"),
    (b'{"start_event": {"question": "Why?"}}', "query: Field required"),
    (b"not json", "not JSON"),
    (b'{"handler_id": "x"}', "names no question"),
    (b'{"start_event": {"query": "why \\ud800?"}}', "lone surrogate"),
    (b'{"start_event": "{\\"query\\": \\"\\\\udc80\\"}"}', "lone surrogate"),
    (b'{"start_event": {"query": "\xed\xa0\x80"}}', "lone surrogate"),
    (b'{"start_event": "' + b"[" * 5000 + b'"}', "start_event"),
], ids=["blank", "kwargs", "envelope", "json-string", "overlong", "not-text", "no-query", "not-json",
        "no-start", "surrogate", "surrogate-in-string", "surrogate-bytes", "deep-string"])
def test_a_run_request_is_read_in_every_shape_the_server_accepts_and_refused_saying_why(
        base_url: str, body: bytes, problem: str) -> None:
    reply = httpx.post(f"{base_url}/workflows/crag/run-nowait", content=body,
                       headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    assert problem in reply.json()["detail"]


def test_a_run_request_in_the_envelope_or_string_shape_starts_a_run(base_url: str) -> None:
    for start in ({"type": "QueryStartEvent", "value": {"query": ANSWERED}}, json.dumps({"query": ANSWERED})):
        reply = httpx.post(f"{base_url}/workflows/crag/run", json={"start_event": start}, timeout=60)
        assert reply.status_code == 200, reply.text
        assert reply.json()["status"] == "completed"


@pytest.mark.parametrize(
    "body",
    [b'{"start_event": {"query": "Why \\udc80?"}}', b"[" * 5000, b'{"start_event": {"query": ' + b"[" * 5000 + b"}}"],
    ids=["lone-surrogate", "deep-list", "deep-query"],
)
def test_a_body_no_step_could_read_is_a_400_and_starts_no_run(base_url: str, body: bytes) -> None:
    before = len(httpx.get(f"{base_url}/handlers").json()["handlers"])

    for route in ("run", "run-nowait"):
        reply = httpx.post(f"{base_url}/workflows/crag/{route}", content=body,
                           headers={"content-type": "application/json"})
        assert reply.status_code == 400, reply.text
        assert "lone surrogate" in reply.json()["detail"] or "nested too deeply" in reply.json()["detail"]
    assert len(httpx.get(f"{base_url}/handlers").json()["handlers"]) == before


def test_with_an_api_key_every_route_but_health_needs_it(sample_index_dir: Path, tmp_path: Path) -> None:
    key = "crag-test-key-0123456789"
    with running(server_settings(sample_index_dir, store=str(tmp_path / "s.db"), api_key=key)) as url:
        assert httpx.get(f"{url}/health").status_code == 200
        assert httpx.get(f"{url}/health").json()["auth"] is True
        for headers in ({}, {"Authorization": "Bearer wrong-key"}, {"X-API-Key": key[:-1]},
                        {"Authorization": key}):
            denied = httpx.get(f"{url}/handlers", headers=headers)
            assert denied.status_code == 401, headers
            assert key not in denied.text and "wrong-key" not in denied.text
        assert httpx.post(f"{url}/workflows/crag/run-nowait", json={"start_event": {"query": ""}}).status_code == 401
        assert httpx.get(f"{url}/handlers", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert httpx.get(f"{url}/handlers", headers={"X-API-Key": key}).status_code == 200
        reply = httpx.post(f"{url}/workflows/crag/run", json={"start_event": {"query": ANSWERED}},
                           headers={"Authorization": f"Bearer {key}"}, timeout=60)
        assert reply.status_code == 200 and reply.json()["status"] == "completed"


def _store_for(kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return str(tmp_path / "server.db")
    if not POSTGRES_URL:
        pytest.skip("CRAG_TEST_POSTGRES_URL is not set; .ci/run starts a PostgreSQL for this "
                    "(locally: export CRAG_TEST_POSTGRES_URL=$(.ci/postgres start /tmp/crag-pg))")
    return POSTGRES_URL


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_finished_run_outlives_a_restart(sample_index_dir: Path, tmp_path: Path, kind: str) -> None:
    store = _store_for(kind, tmp_path)
    with running(server_settings(sample_index_dir, store=store)) as url:
        assert httpx.get(f"{url}/health").json()["store"] == kind
        first = httpx.post(f"{url}/workflows/crag/run", json={"start_event": {"query": WEB}}, timeout=60).json()
        streamed = httpx.get(f"{url}/events/{first['handler_id']}", params={"sse": "false", "after_sequence": "-1"})

    with running(server_settings(sample_index_dir, store=store)) as url:
        handler = httpx.get(f"{url}/handlers/{first['handler_id']}")
        page = httpx.get(f"{url}/handlers/{first['handler_id']}/trace")
        replayed = httpx.get(f"{url}/events/{first['handler_id']}", params={"sse": "false", "after_sequence": "-1"})

    assert handler.status_code == 200 and handler.json()["status"] == "completed"
    assert handler.json()["result"] == first["result"]
    assert CragResult.model_validate(first["result"]["value"]["result"]).verdict.value == "incorrect"
    assert page.status_code == 200 and "web_search" in page.text
    assert replayed.text == streamed.text and "StepProgressEvent" in replayed.text


async def test_servers_sharing_postgresql_stream_and_answer_each_others_runs(
    sample_index_dir: Path, tmp_path: Path
) -> None:
    """Behind a load balancer, the request that streams a run may reach another process."""
    store = _store_for("postgresql", tmp_path)
    questions = [ANSWERED, WEB, "How do I reset the Helio H10?", ANSWERED + " Please.", WEB + " Who?"]
    with running(server_settings(sample_index_dir, store=store)) as a, running(server_settings(sample_index_dir, store=store)) as b:
        starters, watchers = WorkflowClient(base_url=a), WorkflowClient(base_url=b)

        async def ask(question: str) -> tuple[list[StepProgressEvent], CragResult]:
            started = await starters.run_workflow_nowait("crag", start_event={"query": question})
            progress = [
                StepProgressEvent.model_validate(envelope.value)
                async for envelope in watchers.get_workflow_events(started.handler_id, after_sequence=-1)
                if envelope.type == "StepProgressEvent"
            ]
            handler = await watchers.get_handler(started.handler_id)
            assert handler.status == "completed", handler.error
            return progress, CragResult.model_validate(handler.result.value["result"])

        runs = await asyncio.gather(*(ask(q) for q in questions))

    for question, (progress, result) in zip(questions, runs):
        assert result.query == " ".join(question.split())
        _assert_well_ordered(progress, result)


def test_crag_serve_listens_and_takes_its_key_from_the_environment(sample_index_dir: Path, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    key = "crag-env-key-9876543210"
    env = {**os.environ, "CRAG_API_KEY": key}
    exe = shutil.which("crag", path=str(Path(sys.executable).parent))
    command = [exe, "serve", "--port", str(port), "--index", str(sample_index_dir), "--store", str(tmp_path / "server.db")]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        health = None
        deadline = time.monotonic() + 180  # generous: under load a start took up to a minute
        while health is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=60)
            except httpx.ConnectError:
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "crag serve did not start"
                time.sleep(0.1)
        assert health is not None and health.json()["auth"] is True
        assert httpx.get(f"http://127.0.0.1:{port}/handlers").status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/handlers", headers={"X-API-Key": key}).status_code == 200
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}" in stderr and "API key required" in stderr
    assert key not in stderr


def test_crag_serve_without_an_index_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["serve", "--index", str(tmp_path / "none")]) == 2

    err = capsys.readouterr().err
    assert err.startswith("crag: error:") and str(tmp_path / "none") in err


def test_the_api_key_comes_from_crag_api_key_and_stays_hidden() -> None:
    settings = Settings.load(env={"CRAG_API_KEY": "crag-alias-key-123"})

    assert settings.server.api_key.get_secret_value() == "crag-alias-key-123"
    assert "crag-alias-key-123" not in repr(settings) and "crag-alias-key-123" not in str(settings.model_dump())


def test_the_store_is_sqlite_in_the_index_folder_unless_a_url_names_postgresql(tmp_path: Path) -> None:
    beside = store_for(Settings.load(env={}, index={"path": tmp_path / "idx"}))
    shared = store_for(Settings.load(env={}, server={"store": "postgresql://crag:s3cret-pw@db:5432/crag"}))

    assert (beside.kind, beside.where) == ("sqlite", str(tmp_path / "idx" / "server.db"))
    assert (shared.kind, shared.where) == ("postgresql", "postgresql://crag@db:5432/crag")
    assert "s3cret-pw" not in redact("connect to postgresql://crag:s3cret-pw@db failed")


@pytest.mark.parametrize("store, problem", [("mysql://db/crag", "mysql:// is not a store"), (".", "is a folder")])
def test_a_store_crag_cannot_use_is_a_config_error(store: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        store_for(Settings.load(env={}, server={"store": store}))


def test_the_server_process_freezes_what_it_loaded_and_collects_less_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`crag serve` owns its process, so it tunes the collector that `build_workflow` leaves alone."""
    import crag._offload
    from crag.app.server import tune_collector

    before = gc.get_threshold()
    monkeypatch.setattr(crag._offload, "_heap_settled", False)  # as in `crag serve`'s process
    try:
        gc.unfreeze()
        gc.set_threshold(700, 10, 10)  # Python's defaults, which building the workflow kept
        tune_collector()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] > 700
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


async def test_on_postgresql_a_page_of_handlers_is_read_in_sql_not_the_whole_history(tmp_path: Path) -> None:
    """Every page's ids come from a LIMIT query keyed on the `before` run; the store's own
    `query` reads those runs by id, never every matching run."""
    from llama_agents.server import HandlerQuery
    from support.stores import filled, handlers_client

    from crag.app.server.store import PostgresRunStore

    store = PostgresRunStore(_store_for("postgresql", tmp_path))
    await store.start()
    await store.delete(HandlerQuery(workflow_name_in=["crag"]))
    try:
        ids = await filled(store, 75)

        read = store.query

        async def by_id_only(query: HandlerQuery) -> list:
            if query.handler_id_in is None or len(query.handler_id_in) > 20:
                raise AssertionError("GET /handlers read every run to cut one page")
            return await read(query)

        store.query = by_id_only  # type: ignore[method-assign]
        seen: list[str] = []
        async with handlers_client(store) as client:
            url = "/handlers?limit=20"
            while url:
                page = (await client.get(url)).json()
                seen += [h["handler_id"] for h in page["handlers"]]
                url = page["next_before"] and f"/handlers?limit=20&before={page['next_before']}"
            failed = (await client.get("/handlers", params={"limit": 3, "status": "failed", "before": ids[1]})).json()
            unknown = await client.get("/handlers?before=no-such-run")
        assert seen == ids
        assert [h["handler_id"] for h in failed["handlers"]] == [i for i in ids[2:] if int(i[1:]) % 3 == 0][:3]
        assert unknown.status_code == 404
    finally:
        del store.query
        await store.delete(HandlerQuery(workflow_name_in=["crag"]))
        await store.close()


def test_a_finished_runs_handler_id_cannot_be_reused_and_its_record_stays(base_url: str) -> None:
    first = httpx.post(f"{base_url}/workflows/crag/run", json={"start_event": {"query": ANSWERED}}, timeout=60)
    handler_id = first.json()["handler_id"]
    for route in ("run", "run-nowait"):
        again = httpx.post(f"{base_url}/workflows/crag/{route}",
                           json={"start_event": {"query": WEB}, "handler_id": handler_id}, timeout=60)
        assert again.status_code == 409 and "is taken" in again.json()["detail"]
    kept = httpx.get(f"{base_url}/handlers/{handler_id}").json()
    assert kept["status"] == "completed" and kept["result"] == first.json()["result"]


async def test_requests_racing_with_one_new_handler_id_start_one_run_and_nobody_gets_anothers_answer(
    base_url: str,
) -> None:
    handler_id = "raced-" + os.urandom(6).hex()
    questions = [ANSWERED, WEB] * 6  # twelve callers, two questions

    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        replies = await asyncio.gather(*(
            client.post("/workflows/crag/run", json={"start_event": {"query": q}, "handler_id": handler_id})
            for q in questions))
        kept = (await client.get(f"/handlers/{handler_id}")).json()

    started = [(q, r) for q, r in zip(questions, replies, strict=True) if r.status_code == 200]
    refused = [r for r in replies if r.status_code == 409]
    assert len(started) == 1 and len(refused) == 11, [r.status_code for r in replies]
    asked, reply = started[0]
    assert CragResult.model_validate(reply.json()["result"]["value"]["result"]).query == asked  # its own answer
    assert all("is taken" in r.json()["detail"] for r in refused)
    assert kept["status"] == "completed" and kept["result"] == reply.json()["result"]
