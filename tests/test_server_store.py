"""The server's SQLite run store: one connection with SQLite's normal locking, writes that
other connections see at once, and run ticks kept in memory for the run's life only."""

from __future__ import annotations

import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path

from llama_agents.server import PersistentHandler
from llama_agents.server._store.abstract_workflow_store import HandlerQuery

from crag.app.server.stores import SqliteRunStore


def _handler(handler_id: str, status: str = "running") -> PersistentHandler:
    return PersistentHandler(
        handler_id=handler_id,
        workflow_name="crag",
        status=status,
        run_id=f"run-{handler_id}",
        started_at=datetime.now(timezone.utc),
    )


async def test_a_runs_ticks_are_kept_in_memory_until_it_ends_and_never_written(
    tmp_path: Path,
) -> None:
    store = SqliteRunStore(str(tmp_path / "server.db"))
    await store.update(_handler("a"))
    await store.append_tick("run-a", {"serialized_tick": {"n": 0}})
    await store.append_tick("run-a", {"serialized_tick": {"n": 1}})

    running = await store.get_ticks("run-a")
    streamed = [tick async for tick in store.stream_ticks("run-a")]
    await store.update(_handler("a", status="completed"))

    assert [(t.sequence, t.tick_data["serialized_tick"]["n"]) for t in running] == [(0, 0), (1, 1)]
    assert streamed == running
    assert await store.get_ticks("run-a") == []
    with sqlite3.connect(tmp_path / "server.db") as other:
        assert other.execute("SELECT COUNT(*) FROM ticks").fetchone() == (0,)


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
