"""Where the server keeps its runs: llama-agents-server's SQLite or PostgreSQL workflow store.

Handlers (status, result, error) and every streamed event go to the store, so a finished
run's result and trace outlive the process, and several processes can share PostgreSQL.
A run's working state between steps stays in the memory of the process running it: the
state changes several times per step, and writing each change through the store would cost
a serialization and a write on the event loop each time, while a run takes
milliseconds to seconds and never waits for outside input, so there is nothing worth
resuming mid-run. (`RunState` itself round-trips through JSON; this is about cost.)
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from llama_agents.client.protocol.serializable_events import EventEnvelopeWithMetadata
from llama_agents.server import AbstractWorkflowStore, HandlerQuery, PersistentHandler
from workflows.events import (
    InternalDispatchEvent,
    StopEvent,
    WorkflowCancelledEvent,
    WorkflowFailedEvent,
    WorkflowTimedOutEvent,
)

from crag._compat.llama_agents import (
    RESUME_FRESH_HANDLER_GRACE,
    PostgresWorkflowStore,
    RunStateInMemory,
    SqliteOnOneConnection,
    StoredEvent,
    StoredTick,
    is_terminal_status,
)
from crag._bounded import given_up_after
from crag.app.server.unrecorded import UnrecordedEnds
from crag.app.server.writer import StoreThread
from crag.config import Settings
from crag.errors import ConfigError, hide_password
from crag.index.grade_cache_postgres import PostgresGradeCache

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
INTERRUPTED = "the server stopped before the run finished; ask again"
# How long a PostgreSQL read or write may take before its caller is told the store did not
# answer (bounded.py): a frozen database must not hold a request, or a run, for ever.
POSTGRES_TIMEOUT = 5.0
HANDLERS_TABLE = "wf_handlers"  # named here, not left to the store's default: listing.py reads it
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
        except Exception as exc:
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
        try:
            for run_id, event in batch:
                self._insert_event(run_id, event)
            self._commit()
        except BaseException:
            # A full disk or a lock held too long: this turn's events are lost (and logged by
            # the store's thread). Roll back, so that the next write starts clean rather than
            # inside a transaction SQLite may already have abandoned, and read each run's
            # next sequence number from the table again.
            self.connection.rollback()
            for run_id, _ in batch:
                self._sequences.pop(run_id, None)
            raise

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


# PostgresWorkflowStore is exported only from a private module in 0.8 (asyncpg is an
# optional extra there); pyproject.toml pins llama-agents-server below 0.9.
class PostgresRunStore(RunStateInMemory, PostgresWorkflowStore):
    """The server's PostgreSQL store (asyncpg, LISTEN/NOTIFY), run state in memory.

    Each read and write is waited for at most `POSTGRES_TIMEOUT` seconds (bounded.py): a
    stopped database fails at once, a frozen one would otherwise hold every request and run
    that touches the store until it thawed. A run's end that could not be written is kept
    (unrecorded.py) until the orphan sweep writes it.
    """

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn, handlers_table_name=HANDLERS_TABLE)
        self.unrecorded = UnrecordedEnds("postgresql")
        self._appending: dict[str, _RunAppends] = {}  # runs with an append in flight

    def _bounded(self, work: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
        return given_up_after(POSTGRES_TIMEOUT, work, "the postgresql run store")

    async def query(self, query: HandlerQuery) -> list[PersistentHandler]:
        return self.unrecorded.over(await self._bounded(super().query(query)))

    async def update(self, handler: PersistentHandler) -> None:
        handler = self.unrecorded.cleaned(handler)
        try:
            await self._bounded(super().update(handler))
        except Exception as exc:
            self.unrecorded.refused(handler, exc)
            raise
        self.unrecorded.recorded(handler)

    async def delete(self, query: HandlerQuery) -> int:
        return await self._bounded(super().delete(query))

    async def append_event(self, run_id: str, event: EventEnvelopeWithMetadata) -> None:
        """Store a run's event with the next sequence number, in the order appends were made.

        The engine streams each event from a task of its own, and serializes only one step's
        events: two steps' events reach here concurrently. The base class numbers an event by
        MAX(sequence) + 1 in its INSERT and retries on a clash, so the loser of a clash was
        stored after an event emitted later (a run's stream once began with `rewrite` before
        `retrieve`). One lock per run, taken in call order (asyncio's locks are FIFO), keeps
        the stored order the emitted order; the entry lives only while appends are pending.
        """
        appends = self._appending.setdefault(run_id, _RunAppends())
        appends.pending += 1
        try:
            async with appends.lock:
                await self._bounded(super().append_event(run_id, event))
        finally:
            appends.pending -= 1
            if not appends.pending:
                del self._appending[run_id]

    async def query_events(self, run_id: str, after_sequence: int | None = None,
                           limit: int | None = None) -> list[StoredEvent]:
        return await self._bounded(super().query_events(run_id, after_sequence, limit))


@dataclass
class _RunAppends:
    """One run's appends in flight: the lock that orders them, and how many hold or await it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: int = 0


@dataclass(frozen=True)
class StoreChoice:
    """The store, and how to name it: its kind for /health, `where` for the startup line."""

    store: AbstractWorkflowStore
    kind: str  # "sqlite" or "postgresql"
    where: str  # the file, or the database URL without its password


def store_for(settings: Settings) -> StoreChoice:
    """The store `[server] store` names: a postgresql:// URL, a SQLite file, or by default
    `server.db` beside the index, so that a laptop needs no database server."""
    target = settings.server.store or str(settings.index.path.parent / "server.db")
    if target.startswith(POSTGRES_SCHEMES):
        return StoreChoice(PostgresRunStore(target), "postgresql", hide_password(target))
    if "://" in target:
        raise ConfigError(
            f"server.store {target.split('://')[0]}:// is not a store crag knows; "
            "give a SQLite file path or a postgresql:// URL."
        )
    path = Path(target)
    if path.is_dir():
        raise ConfigError(
            f"server.store {path} is a folder; give a SQLite file such as {path / 'server.db'}."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    return StoreChoice(SqliteRunStore(str(path)), "sqlite", str(path))


def grade_cache_for(settings: Settings) -> PostgresGradeCache | None:
    """On a postgresql:// store, the grade cache in the same database, shared by every server
    that shares it; None otherwise (the workflow keeps grades in SQLite beside the index)."""
    target = settings.server.store or ""
    if not settings.cache.enabled or not target.startswith(POSTGRES_SCHEMES):
        return None
    return postgres_grade_cache(target, settings)


def postgres_grade_cache(url: str, settings: Settings, *, timeout: float = 2.0) -> PostgresGradeCache:
    """The grade cache in the PostgreSQL database at `url` (`crag cache --store URL` too)."""
    if not url.startswith(POSTGRES_SCHEMES):
        raise ConfigError(f"{url.split('://')[0]} is not a postgresql:// URL; the grade cache lives "
                          "in PostgreSQL only with a postgresql:// store (else grades.sqlite beside the index).")
    hide_password(url)  # its passwords registered: asyncpg's errors may quote the URL
    return PostgresGradeCache(url, max_entries=settings.cache.max_entries, timeout=timeout)


