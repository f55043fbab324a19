"""A long-lived `crag serve` stays honest: /health probes the store and the index within a
time limit, history is pruned to keep_runs / keep_days, runs no live server claims are failed,
and cancelling a run that is not running here says what became of it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from llama_agents.server import PersistentHandler
from llama_agents.server._store.abstract_workflow_store import HandlerQuery
from support.paths import SAMPLES
from support.serving import ANSWERED, running, server_settings

from crag.app.server.ops.upkeep import ORPHANED, LiveRuns, Upkeep
from crag.app.server.store import PostgresRunStore, SqliteRunStore

POSTGRES_URL = os.environ.get("CRAG_TEST_POSTGRES_URL")
ANSWER = 60.0  # seconds a reply may take on a busy machine (two cores, four CPU burners)
SETTLED = 120.0  # seconds until a condition waited for must hold


def _handler(handler_id: str, status: str = "running", age: float = 0.0) -> PersistentHandler:
    at = datetime.now(timezone.utc) - timedelta(seconds=age)
    return PersistentHandler(handler_id=handler_id, workflow_name="crag", status=status,
                             run_id=f"run-{handler_id}", started_at=at,
                             completed_at=at if status != "running" else None)


def _upkeep(store, kind: str, where: str, tmp_path: Path, **kw) -> Upkeep:
    options = {"keep_runs": 1000, "keep_days": 30.0, "orphan_after": 1.0} | kw
    return Upkeep(store, kind, where, live=LiveRuns(), **options)


@pytest.fixture(params=["sqlite", "postgresql"])
async def store_and_kind(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "sqlite":
        where = str(tmp_path / "server.db")
        store = SqliteRunStore(where)
    else:
        if not POSTGRES_URL:
            pytest.skip("CRAG_TEST_POSTGRES_URL is not set")
        where = POSTGRES_URL
        store = PostgresRunStore(POSTGRES_URL)
        await store.start()
        await store.delete(HandlerQuery(workflow_name_in=["crag"]))
    yield store, request.param, where
    if request.param == "postgresql":
        await store.delete(HandlerQuery(workflow_name_in=["crag"]))


async def test_runs_no_live_server_claims_are_failed_and_claimed_ones_kept(store_and_kind, tmp_path: Path) -> None:
    store, kind, where = store_and_kind
    for handler in (_handler("orphan", age=30), _handler("elsewhere", age=30),
                    _handler("mine", age=30), _handler("done", "completed", age=30)):
        await store.update(handler)
    # Heartbeats go stale after 3 s: long enough for a busy machine to get from a beat (or a
    # fresh run) to the sweep, short enough to wait for below.
    other = _upkeep(store, kind, where, tmp_path, orphan_after=3.0)  # another live server, running "elsewhere"
    other.live.ids.add("run-elsewhere")
    await other.beat()
    this = _upkeep(store, kind, where, tmp_path, orphan_after=3.0)
    this.live.ids.add("run-mine")
    await store.update(_handler("fresh"))

    await this.beat_and_sweep()

    found = {h.handler_id: h for h in await store.query(HandlerQuery(workflow_name_in=["crag"]))}
    assert found["orphan"].status == "failed" and found["orphan"].error == ORPHANED
    assert found["fresh"].status == "running"  # too young to judge: its server may not have beaten yet
    assert found["elsewhere"].status == "running" and found["mine"].status == "running"
    assert found["done"].status == "completed"

    # The other server beats no more (it died): once its heartbeat is stale, its run is failed.
    deadline = time.monotonic() + SETTLED
    while found["elsewhere"].status == "running":
        assert time.monotonic() < deadline, "the dead server's run stayed running"
        await asyncio.sleep(0.2)
        await this.beat_and_sweep()
        found = {h.handler_id: h for h in await store.query(HandlerQuery(workflow_name_in=["crag"]))}
    assert found["elsewhere"].status == "failed" and found["mine"].status == "running"


async def test_history_keeps_the_newest_keep_runs_and_nothing_older_than_keep_days(store_and_kind, tmp_path: Path) -> None:
    store, kind, where = store_and_kind
    for n in range(5):
        await store.update(_handler(f"r{n}", "completed", age=60 * (5 - n)))  # r4 newest
    await store.update(_handler("ancient", "failed", age=3 * 86400))
    await store.update(_handler("live", age=3 * 86400))

    await _upkeep(store, kind, where, tmp_path, keep_runs=3, keep_days=1.0).prune()

    left = {h.handler_id for h in await store.query(HandlerQuery(workflow_name_in=["crag"]))}
    assert left == {"r2", "r3", "r4", "live"}  # a running run is never pruned


def test_health_is_503_when_the_sqlite_store_is_locked_and_answers_within_its_limit(
    sample_index_dir: Path, tmp_path: Path
) -> None:
    db = tmp_path / "server.db"
    with running(server_settings(sample_index_dir, store=str(db))) as url:
        assert httpx.get(f"{url}/health").status_code == 200
        locker = sqlite3.connect(db, timeout=0)
        locker.execute("BEGIN EXCLUSIVE")
        try:
            # The lock is held until this answers: a probe that waited it out would never answer.
            reply = httpx.get(f"{url}/health", timeout=ANSWER)
        finally:
            locker.rollback()
            locker.close()
        assert reply.status_code == 503 and "sqlite store" in reply.json()["error"]
        assert httpx.get(f"{url}/health", timeout=ANSWER).status_code == 200


def test_health_is_503_when_the_served_index_is_gone_from_disk(sample_index_dir: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    shutil.copytree(sample_index_dir, index)
    with running(server_settings(index, store=str(tmp_path / "server.db"))) as url:
        assert httpx.get(f"{url}/health").status_code == 200
        version = (index / "CURRENT").read_text().strip()
        (index / version / "manifest.json").rename(index / "moved.json")
        reply = httpx.get(f"{url}/health")
    assert reply.status_code == 503 and "index" in reply.json()["error"]


def test_cancelling_a_finished_run_says_how_it_ended(base_url: str) -> None:
    done = httpx.post(f"{base_url}/workflows/crag/run", json={"start_event": {"query": ANSWERED}}, timeout=60).json()

    reply = httpx.post(f"{base_url}/handlers/{done['handler_id']}/cancel")

    assert reply.status_code == 409
    assert reply.json()["status"] == "completed" and "nothing to cancel" in reply.json()["detail"]


def test_cancelling_an_orphaned_run_marks_it_failed_and_says_so(sample_index_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    with running(server_settings(sample_index_dir, store=str(db), orphan_after=1.0)) as url:
        store = SqliteRunStore(str(db))  # another process's run, left running when it died
        asyncio.run(store.update(_handler("ghost", age=30)))
        store.close()
        reply = httpx.post(f"{url}/handlers/ghost/cancel")
    assert reply.status_code == 409
    assert reply.json()["status"] == "failed" and "server running it stopped" in reply.json()["detail"]


def _ask(url: str, question: str) -> dict:
    reply = httpx.post(f"{url}/workflows/crag/run", json={"start_event": {"query": question}}, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()["result"]["value"]["result"]


def test_a_new_index_version_is_served_without_a_restart(sample_index_dir: Path, tmp_path: Path) -> None:
    from crag import ingest
    from crag.index import ChunkIndex

    index, docs = tmp_path / "index", tmp_path / "docs"
    shutil.copytree(sample_index_dir, index)
    shutil.copytree(SAMPLES / "docs", docs)
    question = "What colour is the Zorbulator 9000 chassis?"
    with running(server_settings(index, store=str(tmp_path / "server.db"))) as url:
        before = _ask(url, question)
        assert "zorbulator" not in json.dumps(before["sources"]).lower()
        files_before = httpx.get(f"{url}/health").json()["index"]
        (docs / "zorbulator.md").write_text("# Zorbulator 9000\n\nThe Zorbulator 9000 chassis is teal.\n")
        ingest([docs], index)
        deadline = time.monotonic() + SETTLED
        while True:
            after = _ask(url, question)
            if "zorbulator" in json.dumps(after["sources"]).lower():
                break
            assert time.monotonic() < deadline, "the new version was not picked up"
            time.sleep(0.5)
        health = httpx.get(f"{url}/health")
        assert health.status_code == 200
        served = ChunkIndex.load(index)  # /health reads the index served now, not the first one
        assert health.json()["index"] == {"chunks": len(served), "files": len(served.manifest)} != files_before

        (index / "CURRENT.tmp").write_text("v999\n")  # a pointer to a version that is not there
        (index / "CURRENT.tmp").replace(index / "CURRENT")
        deadline = time.monotonic() + SETTLED  # the pointer is read by /health's probe and the reloader
        while (health := httpx.get(f"{url}/health", timeout=ANSWER)).status_code == 200:
            assert time.monotonic() < deadline, "/health never noticed the missing version"
            time.sleep(0.2)
        assert health.status_code == 503 and "index" in health.json()["error"]
        assert "zorbulator" in json.dumps(_ask(url, question)["sources"]).lower()  # the last good version serves on


async def test_a_run_end_the_store_refuses_reads_failed_at_once_and_the_sweep_writes_it(tmp_path: Path) -> None:
    """Another process holds the SQLite write lock past the store's wait: the run's last
    write fails, as on a full disk. No mount needed (the tmpfs chaos test needs one)."""
    db = tmp_path / "server.db"
    store = SqliteRunStore(str(db))
    await store.start()
    await store.update(_handler("cut", age=5))
    await store._call(lambda: store.connection.execute("PRAGMA busy_timeout = 50"))  # not 30 s
    this = _upkeep(store, "sqlite", str(db), tmp_path)
    locker = sqlite3.connect(db)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError):
            await store.update_handler_status("run-cut", status="completed")
        [seen] = await store.query(HandlerQuery(handler_id_in=["cut"]))
        with pytest.raises(sqlite3.OperationalError):
            await this.sweep(set())  # still locked: nothing written, nothing forgotten
    finally:
        locker.rollback()
        locker.close()
    await this.sweep(set())
    stored = sqlite3.connect(db).execute("SELECT status, error FROM handlers WHERE handler_id = 'cut'").fetchone()
    store.close()

    assert seen.status == "failed" and "could not record it (database is locked)" in seen.error
    assert stored == ("failed", seen.error)
    assert store.unrecorded.errors == {}
