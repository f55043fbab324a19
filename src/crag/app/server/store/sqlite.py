"""The run store on SQLite: one file (`server.db` beside the index by default), one
connection for the store's life, on a thread of its own (writer.py).

A run's working state between steps stays in memory (the room's docstring, `__init__.py`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from llama_agents.client.protocol.serializable_events import EventEnvelopeWithMetadata
from llama_agents.server import HandlerQuery, PersistentHandler
from workflows.events import (
    InternalDispatchEvent,
    StopEvent,
    WorkflowCancelledEvent,
    WorkflowFailedEvent,
    WorkflowTimedOutEvent,
)

from crag._compat.llama_agents import (
    RESUME_FRESH_HANDLER_GRACE,
    SqliteOnOneConnection,
    StoredEvent,
    StoredTick,
    is_terminal_status,
)
from crag.app.server.store.unrecorded import UnrecordedEnds
from crag.app.server.store.writer import StoreThread

INTERRUPTED = "the server stopped before the run finished; ask again"
INTERNAL_EVENT = InternalDispatchEvent.__name__
T = TypeVar("T")
TERMINAL_EVENTS = frozenset(
    e.__name__ for e in (WorkflowFailedEvent, WorkflowCancelledEvent, WorkflowTimedOutEvent)
)


class SqliteRunStore(SqliteOnOneConnection):
    """The server's SQLite store, run state in memory, one connection for the store's life,
    used only by a thread of its own (writer.py), never by the event loop.

    The base class opens, commits and closes a connection for every event a run streams,
    on the event loop's thread; the open and the commit's fsync dominated the server's time
    under load. Its `single_connection` mode avoids that but turns file locking off, so a
    second process opening the file could corrupt it; this connection keeps SQLite's normal
    locking. Every call that reads or writes runs on the store's thread, in the order made:
    the base class's SQL (`_base`), and crag's own.

    Events: the engine's internal ones (`StepStateChanged`, two per step) are not kept:
    crag's own `StepProgressEvent`s say the same and more, and they were half of every
    run's writes (`GET /events/{id}?include_internal=true` therefore adds nothing). An
    event is not waited for: the events of one turn of the event loop are handed to the
    store's thread together at its end, written and committed at once; a run's next
    sequence number is counted there, not read back per event. A read made after an event
    is queued behind it, so sees it.
    (`stream_ticks` and `get_legacy_ctx` belong to the server's tick persistence, which
    `crag serve` does not run; they are left as the base class has them.)
    """

    def __init__(self, db_path: str) -> None:
        super().__init__(db_path, _long_lived_connection)
        self._sequences: dict[str, int] = {}  # the store's thread's alone
        self._pending: list[tuple[str, EventEnvelopeWithMetadata]] = []  # the event loop's alone
        self.commits = 0  # how many commits carried events (for tests)
        self.unrecorded = UnrecordedEnds("sqlite")
        self._thread = StoreThread(f"crag-store {Path(db_path).name}")

    async def start(self) -> None:
        """Mark failed the runs a previous process left running.

        `crag serve` runs its workflow on the engine's basic runtime, without the server's
        tick persistence (see `build_server`): nothing resumes a run mid-way, so a run still
        marked running when the server starts, begun before the grace window the server itself
        uses for runs starting at that moment, was cut off. (PostgreSQL is left alone: there a
        run marked running may belong to another live server.)
        """
        await super().start()
        cutoff = datetime.now(timezone.utc) - RESUME_FRESH_HANDLER_GRACE
        for handler in await self.query(HandlerQuery(status_in=["running"])):
            if handler.run_id and (handler.started_at is None or handler.started_at < cutoff):
                await self.update_handler_status(handler.run_id, status="failed", error=INTERRUPTED)

    # --- the base class's SQL, on the store's thread ----------------------------------------

    async def query(self, query: HandlerQuery) -> list[PersistentHandler]:
        return self.unrecorded.over(await self._base("query", query))

    async def update(self, handler: PersistentHandler) -> None:
        handler = self.unrecorded.cleaned(handler)
        try:
            await self._base("update", handler)
        except Exception as exc:  # any failure: noted as unrecorded, then re-raised
            self.unrecorded.refused(handler, exc)
            raise
        finally:
            if handler.run_id and is_terminal_status(handler.status):
                self.forget_run_state(handler.run_id)  # as RunStateInMemory.update does
        self.unrecorded.recorded(handler)

    async def delete(self, query: HandlerQuery) -> int:
        return await self._base("delete", query)

    async def query_events(self, run_id: str, after_sequence: int | None = None,
                           limit: int | None = None) -> list[StoredEvent]:
        return await self._base("query_events", run_id, after_sequence, limit)

    async def append_tick(self, run_id: str, tick_data: dict[str, Any]) -> None:
        await self._base("append_tick", run_id, tick_data)

    async def get_ticks(self, run_id: str) -> list[StoredTick]:
        return await self._base("get_ticks", run_id)

    async def _base(self, name: str, *args: Any) -> Any:
        return await self._call(self._commit_then_base, name, *args)

    def _commit_then_base(self, name: str, *args: Any) -> Any:
        self._commit()  # so that a failed base write's rollback cannot take queued events with it
        return self.run_base(name, *args)

    # --- events -----------------------------------------------------------------------------

    async def append_event(self, run_id: str, event: EventEnvelopeWithMetadata) -> None:
        if INTERNAL_EVENT in (event.types or ()):
            return
        if not self._pending:  # the first of this turn: write them all at its end
            asyncio.get_running_loop().call_soon(self._hand_over)
        self._pending.append((run_id, event))
        await self.wake_readers(run_id)  # a reader's next query is queued behind this event

    def _hand_over(self) -> None:
        """Queue this turn's events, then a commit, as one job: one wake-up of the store's
        thread per turn, not one per event (each wake-up is a hand-over of the interpreter
        lock, which per event cost a measurable share of the server's CPU per question:
        benchmarks/throughput.py)."""
        if self._pending:
            batch, self._pending = self._pending, []
            self._thread.put(self._write_events, batch)

    def _write_events(self, batch: list[tuple[str, EventEnvelopeWithMetadata]]) -> None:
        with ExitStack() as unless_written:
            unless_written.callback(self._start_over, [run_id for run_id, _ in batch])
            for run_id, event in batch:
                self._insert_event(run_id, event)
            self._commit()
            unless_written.pop_all()

    def _start_over(self, run_ids: list[str]) -> None:
        """After a failed write (a full disk, a lock held too long: this turn's events are lost,
        and logged by the store's thread): roll back, so that the next write starts clean rather
        than inside a transaction SQLite may already have abandoned, and read each run's next
        sequence number from the table again."""
        self.connection.rollback()
        for run_id in run_ids:
            self._sequences.pop(run_id, None)

    def _insert_event(self, run_id: str, event: EventEnvelopeWithMetadata) -> None:
        sequence = self._sequences.get(run_id)
        if sequence is None:
            row = self.connection.execute(
                "SELECT MAX(sequence) FROM events WHERE run_id = ?", (run_id,)
            ).fetchone()
            sequence = -1 if row[0] is None else row[0]
        self.connection.execute(
            "INSERT INTO events (run_id, sequence, timestamp, event_json) "
            "VALUES (?, ?, CURRENT_TIMESTAMP, ?)",
            (run_id, sequence + 1, event.model_dump_json()),
        )
        if StopEvent.__name__ in (event.types or ()) or event.type in TERMINAL_EVENTS:
            self._sequences.pop(run_id, None)
        else:
            self._sequences[run_id] = sequence + 1

    def _commit(self) -> None:
        if self.connection.in_transaction:
            try:
                self.connection.commit()
            except sqlite3.Error:
                self.connection.rollback()  # see _write_events
                raise
            self.commits += 1

    async def _call(self, job: Callable[..., T], *args: Any) -> T:
        self._hand_over()  # events appended earlier are written before this job reads
        return await self._thread.call(job, *args)

    async def flush(self) -> None:
        """Wait until everything queued so far is written and committed."""
        await self._call(self._commit)

    def close(self) -> None:
        """Write what is queued, commit, close the connection and end the store's thread (the
        store cannot be used afterwards)."""
        self._hand_over()
        self._thread.stop(last=lambda: (self._commit(), self.connection.close()))


def _long_lived_connection(db_path: str) -> sqlite3.Connection:
    # Opened where the store is built; only the store's thread uses it after that.
    connection = sqlite3.connect(db_path, timeout=30.0, check_same_thread=False)
    # In WAL mode (set by the store's migrations), NORMAL syncs at checkpoints instead of
    # at every commit: a crash of the process loses nothing committed, but a power failure
    # or OS crash may lose the last commits (runs then read as never stored or unfinished).
    connection.execute("PRAGMA synchronous=NORMAL")
    return connection
