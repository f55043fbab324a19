"""Admission control and the request guard of `crag serve`, over loopback HTTP against a real
uvicorn server: a cap on runs in flight, a bounded FIFO queue, 503 with Retry-After, a cap on
bodies, no outside events, and loopback-only service without an API key."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from support.loopback import uvicorn_serving
from support.serving import ANSWERED, running, server_settings, server_with
from support.waiting import wait_for
from support.workflow import GatedGrader

from crag.app.server.ops.admission import Admission
from crag.app.server.ops.guard import check_bind, is_loopback
from crag.errors import ConfigError

RUN = "/workflows/crag/run-nowait"
BODY = {"start_event": {"query": ANSWERED}}


async def test_runs_beyond_the_cap_wait_in_line_then_beyond_the_line_get_503(
    sample_index_dir: Path, tmp_path: Path
) -> None:
    settings = server_settings(sample_index_dir, store=str(tmp_path / "s.db"), max_runs=2, max_queue=1)
    grader = GatedGrader()
    with uvicorn_serving(server_with(settings, grader).app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            first = [(await client.post(RUN, json=BODY)).json()["handler_id"] for _ in range(2)]
            await wait_for(lambda: grader.inside == 2)
            queued = asyncio.create_task(client.post(RUN, json=BODY))
            await asyncio.sleep(0.3)
            assert not queued.done()  # in line, not started

            refused = await client.post(RUN, json=BODY)
            assert refused.status_code == 503
            assert int(refused.headers["retry-after"]) >= 1
            assert "busy" in refused.json()["detail"]

            grader.gate.set()
            third = (await queued).json()["handler_id"]
            for handler_id in [*first, third]:
                await _wait_for_status(client, handler_id)
    assert grader.peak == 2


async def _wait_for_status(client: httpx.AsyncClient, handler_id: str) -> None:
    for _ in range(500):
        status = (await client.get(f"/handlers/{handler_id}")).json()["status"]
        if status != "running":
            assert status == "completed"
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{handler_id} still running")


async def test_the_line_is_first_come_first_served_and_a_freed_slot_passes_straight_on() -> None:
    admission = Admission(max_runs=1, max_queue=3, max_wait=5)
    holder = await admission.acquire()
    order: list[int] = []

    async def wait(n: int) -> None:
        slot = await admission.acquire()
        order.append(n)
        await asyncio.sleep(0.01)
        slot.release()

    waiters = [asyncio.create_task(wait(n)) for n in range(3)]
    await asyncio.sleep(0.05)
    assert admission.queued == 3 and admission.running == 1
    assert await admission.acquire() is None  # the line is full
    holder.release()
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2] and admission.running == 0


async def test_a_request_waiting_too_long_in_line_is_refused_and_leaves_the_line() -> None:
    admission = Admission(max_runs=1, max_queue=1, max_wait=0.1)
    holder = await admission.acquire()
    assert await admission.acquire() is None
    assert admission.queued == 0
    holder.release()
    assert admission.running == 0


def test_a_body_over_the_cap_is_a_413_by_its_length_or_as_it_streams(base_url: str) -> None:
    big = b'{"start_event": {"query": "' + b"a" * 70_000 + b'"}}'
    by_length = httpx.post(f"{base_url}{RUN}", content=big, headers={"content-type": "application/json"})
    assert by_length.status_code == 413 and "max_body_bytes" in by_length.json()["detail"]

    def chunks():
        for start in range(0, len(big), 8192):
            yield big[start:start + 8192]

    streamed = httpx.post(f"{base_url}{RUN}", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413


def test_an_outside_event_to_a_run_is_refused(base_url: str) -> None:
    reply = httpx.post(f"{base_url}/events/some-run", json={"event": {"type": "StopEvent", "value": {}}})

    assert reply.status_code == 405
    assert reply.headers["allow"] == "GET"
    assert "waits for no outside event" in reply.json()["detail"]


@pytest.mark.parametrize("headers", [
    {"host": "evil.example"},  # DNS rebinding: a foreign name resolving to 127.0.0.1
    {"origin": "http://evil.example"},  # another site's page in the user's browser
    {"origin": "null"},
])
def test_without_a_key_foreign_hosts_and_origins_are_refused(base_url: str, headers: dict) -> None:
    reply = httpx.get(f"{base_url}/handlers", headers=headers)

    assert reply.status_code == 403, reply.text
    assert "no API key" in reply.json()["detail"]


def test_without_a_key_the_servers_own_origin_and_loopback_names_pass(base_url: str) -> None:
    port = base_url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        reply = httpx.get(f"{base_url}/handlers", headers={"host": host, "origin": f"http://{host}"})
        assert reply.status_code == 200, (host, reply.text)


def test_with_a_key_any_host_is_served(sample_index_dir: Path, tmp_path: Path) -> None:
    settings = server_settings(sample_index_dir, store=str(tmp_path / "s.db"), api_key="k" * 24)
    with running(settings) as url:
        reply = httpx.get(f"{url}/handlers", headers={"host": "crag.internal", "x-api-key": "k" * 24})
    assert reply.status_code == 200


def test_without_a_key_the_server_listens_on_loopback_only() -> None:
    check_bind("127.0.0.1", "")
    check_bind("::1", "")
    check_bind("0.0.0.0", "a-key")
    with pytest.raises(ConfigError, match="CRAG_API_KEY"):
        check_bind("0.0.0.0", "")
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and not is_loopback("10.0.0.1")
