"""The server's SQLite run store: one connection with SQLite's normal locking, used only on a
thread of its own, writes that other connections see at once, events numbered in memory and
committed per loop turn, and runs cut off by a restart marked failed."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from llama_agents.client.protocol.serializable_events import EventEnvelopeWithMetadata
from llama_agents.server import PersistentHandler
from llama_agents.server._store.abstract_workflow_store import HandlerQuery
from workflows.events import Event, StepState, StepStateChanged, StopEvent

from crag.app.server.store import PostgresRunStore, SqliteRunStore
from crag.events import StepProgressEvent


def _handler(handler_id: str, status: str = "running") -> PersistentHandler:
    return PersistentHandler(
        handler_id=handler_id,
        workflow_name="crag",
        status=status,
        run_id=f"run-{handler_id}",
        started_at=datetime.now(timezone.utc),
    )


def _envelope(event: Event) -> EventEnvelopeWithMetadata:
    return EventEnvelopeWithMetadata.from_event(event)


async def test_events_are_numbered_per_run_and_engine_internals_are_not_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "server.db"
    store = SqliteRunStore(str(path))
    await store.update(_handler("a"))
    internal = StepStateChanged(
        step_state=StepState.RUNNING, name="grade", worker_id="0", input_event_name="E"
    )
    for event in (
        StepProgressEvent(step="grade", status="started"),
        internal,
        StepProgressEvent(step="grade", status="finished", seconds=0.1),
    ):
        await store.append_event("run-a", _envelope(event))
    await asyncio.sleep(0)  # the loop turn ends: the first store queues its commit
    await store.flush()
    reopened = SqliteRunStore(str(path))  # a restart: numbering continues from the file
    await reopened.append_event("run-a", _envelope(StopEvent(result="done")))

    kept = await reopened.query_events("run-a")
    assert [(e.sequence, e.event.type) for e in kept] == [
        (0, "StepProgressEvent"),
        (1, "StepProgressEvent"),
        (2, "StopEvent"),
    ]


async def test_events_written_together_are_committed_by_the_end_of_the_loop_turn(
    tmp_path: Path,
) -> None:
    path = tmp_path / "server.db"
    store = SqliteRunStore(str(path))
    for n in range(3):
        await store.append_event(
            "run-a", _envelope(StepProgressEvent(step=f"s{n}", status="started"))
        )
    await asyncio.sleep(0)  # the turn ends: one commit is queued behind the three events
    await store.flush()

    with sqlite3.connect(path) as other:
        assert other.execute("SELECT COUNT(*) FROM events").fetchone() == (3,)
    assert store.commits == 1


async def test_the_store_reads_and_writes_on_its_own_thread_never_the_event_loops(
    tmp_path: Path,
) -> None:
    store = SqliteRunStore(str(tmp_path / "server.db"))
    threads: set[int] = set()
    store.connection.set_trace_callback(lambda _sql: threads.add(threading.get_ident()))
    await store.update(_handler("a"))
    for n in range(5):
        await store.append_event("run-a", _envelope(StepProgressEvent(step=f"s{n}", status="started")))
    events = await store.query_events("run-a")  # queued behind the events: sees all five
    await store.update(_handler("a", status="completed"))
    found = await store.query(HandlerQuery(handler_id_in=["a"]))
    store.close()

    assert [e.sequence for e in events] == [0, 1, 2, 3, 4]
    assert found[0].status == "completed"
    assert threads and threading.get_ident() not in threads
    assert len(threads) == 1


async def test_a_reader_waiting_on_a_run_gets_its_events_in_order(tmp_path: Path) -> None:
    store = SqliteRunStore(str(tmp_path / "server.db"))
    await store.update(_handler("a"))

    async def read() -> list[str]:
        return [e.event.value.get("step", "stop") async for e in store.subscribe_events("run-a")]

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.05)  # the reader waits on the run's condition
    for n in range(20):
        await store.append_event("run-a", _envelope(StepProgressEvent(step=f"s{n}", status="started")))
        if n % 7 == 0:
            await asyncio.sleep(0)
    await store.append_event("run-a", _envelope(StopEvent(result="done")))

    assert await asyncio.wait_for(reader, 60) == [f"s{n}" for n in range(20)] + ["stop"]  # generous: a busy machine
    store.close()


async def test_on_start_runs_a_previous_process_left_running_are_failed(tmp_path: Path) -> None:
    """crag serve cannot resume a run mid-way (its state is in memory): it says so."""
    store = SqliteRunStore(str(tmp_path / "server.db"))
    old = _handler("old")
    old.started_at = datetime.now(timezone.utc) - timedelta(minutes=5)
    await store.update(old)
    await store.update(_handler("fresh"))  # within the server's grace window: left alone
    await store.update(_handler("done", status="completed"))

    await store.start()

    found = {h.handler_id: h for h in await store.query(HandlerQuery())}
    assert (
        found["old"].status == "failed" and "stopped before the run finished" in found["old"].error
    )
    assert found["fresh"].status == "running"
    assert found["done"].status == "completed"


async def test_what_the_store_writes_another_connection_reads_at_once(tmp_path: Path) -> None:
    """A restarted server, or a second store on the same file, sees every finished write."""
    path = tmp_path / "server.db"
    store = SqliteRunStore(str(path))
    await store.update(_handler("a", status="completed"))

    reopened = SqliteRunStore(str(path))
    found = await reopened.query(HandlerQuery(handler_id_in=["a"]))

    assert [(h.handler_id, h.status) for h in found] == [("a", "completed")]


async def test_a_write_waits_while_another_connection_holds_the_lock(tmp_path: Path) -> None:
    """File locking stays on (the base class's single-connection mode turns it off): a
    second process writing the same file is waited for, not raced."""
    path = tmp_path / "server.db"
    store = SqliteRunStore(str(path))
    other = sqlite3.connect(path, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # holds the write lock
    other.execute(
        "INSERT INTO handlers (handler_id, workflow_name, status) VALUES ('b', 'crag', 'running')"
    )
    committed = threading.Event()
    release = threading.Event()

    def commit_later() -> None:
        release.wait()
        other.commit()
        committed.set()

    threading.Thread(target=commit_later, daemon=True).start()
    threading.Timer(0.2, release.set).start()
    await store.update(_handler("a"))  # blocks in SQLite's busy handler until the commit

    assert committed.is_set(), "the store wrote while another connection held the lock"
    found = await store.query(HandlerQuery(handler_id_in=["a", "b"]))
    assert sorted(h.handler_id for h in found) == ["a", "b"]
    other.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_events_streamed_from_concurrent_tasks_are_stored_in_the_order_they_were_sent(
    tmp_path: Path, kind: str
) -> None:
    """The engine streams each event from a task of its own, and two steps' events are not
    ordered by it: the store keeps them in the order the tasks reached it."""
    if kind == "sqlite":
        store = SqliteRunStore(str(tmp_path / "server.db"))
    elif not os.environ.get("CRAG_TEST_POSTGRES_URL"):
        pytest.skip("CRAG_TEST_POSTGRES_URL is not set")
    else:
        store = PostgresRunStore(os.environ["CRAG_TEST_POSTGRES_URL"])
    run_id = f"run-{uuid.uuid4().hex}"
    steps = [f"step{i:02d}" for i in range(24)]
    try:
        sent = [
            asyncio.create_task(store.append_event(run_id, _envelope(StepProgressEvent(step=s, status="started"))))
            for s in steps
        ]
        await asyncio.gather(*sent)
        kept = await store.query_events(run_id)
    finally:
        if kind == "sqlite":
            store.close()
        else:
            await store.close()

    assert [e.sequence for e in kept] == list(range(len(steps)))
    assert [e.event.value["step"] for e in kept] == steps
