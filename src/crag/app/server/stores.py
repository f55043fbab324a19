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

import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from llama_agents.server import AbstractWorkflowStore, PersistentHandler, SqliteWorkflowStore
from llama_agents.server._store.abstract_workflow_store import StoredTick, is_terminal_status
from llama_agents.server._store.postgres_workflow_store import PostgresWorkflowStore
from workflows.context.serializers import BaseSerializer
from workflows.context.state_store import DictState, InMemoryStateStore

from crag.config import Settings
from crag.errors import ConfigError, register_secret

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class _RunStateInMemory:
    """Keeps each run's step-to-step state in memory (see the module docstring), held until
    the run ends (the base class holds it weakly, for stores that reload it from storage)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._state_store_cache = {}

    async def update(self, handler: PersistentHandler) -> None:
        await super().update(handler)  # type: ignore[misc]
        if handler.run_id and is_terminal_status(handler.status):
            self._evict_run_state_stores(handler.run_id)  # type: ignore[attr-defined]

    def _build_state_store(
        self,
        run_id: str,
        namespace: tuple[str, ...],
        state_type: type[Any] | None,
        serializer: BaseSerializer | None,
    ) -> InMemoryStateStore[Any]:
        return InMemoryStateStore(state_type() if state_type else DictState())


class SqliteRunStore(_RunStateInMemory, SqliteWorkflowStore):
    """The server's SQLite store, run state in memory, one connection for the store's life.

    The base class opens, commits and closes a connection for every event and tick a run
    streams (about 50 per run), on the event loop's thread; the open and the commit's fsync
    dominated the server's time under load. Its `single_connection` mode avoids that but
    turns file locking off, so a second process opening the file could corrupt it; this
    connection keeps SQLite's normal locking.

    A run's ticks (the engine's step-by-step log, about 17 per run, each a serialized
    event) stay in memory until the run ends, not in the file: the server reads them only
    to see that a run has started and to rebuild a run mid-way (after a restart, or to
    reload an idle one), and a crag run cannot be rebuilt mid-way since its state is in
    memory too. After a restart, a run that was cut off reads as failed, not resumed.
    """

    def __init__(self, db_path: str) -> None:
        super().__init__(db_path)  # migrations (and WAL) on a connection of their own
        self._connection = _long_lived_connection(db_path)
        self._ticks: dict[str, list[StoredTick]] = {}

    async def update(self, handler: PersistentHandler) -> None:
        await super().update(handler)
        if handler.run_id and is_terminal_status(handler.status):
            self._ticks.pop(handler.run_id, None)

    async def append_tick(self, run_id: str, tick_data: dict[str, Any]) -> None:
        ticks = self._ticks.setdefault(run_id, [])
        now = datetime.now(timezone.utc)
        ticks.append(
            StoredTick(run_id=run_id, sequence=len(ticks), timestamp=now, tick_data=tick_data)
        )

    async def get_ticks(self, run_id: str) -> list[StoredTick]:
        return list(self._ticks.get(run_id, ()))

    async def stream_ticks(self, run_id: str) -> AsyncIterator[StoredTick]:
        for tick in await self.get_ticks(run_id):
            yield tick

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            yield self._connection
        except BaseException:
            self._connection.rollback()  # a shared connection must not keep a half-done write open
            raise

    def close(self) -> None:
        """Close the connection (the store cannot be used afterwards)."""
        self._connection.close()


def _long_lived_connection(db_path: str) -> sqlite3.Connection:
    # The server builds its store on one thread and may serve on another (uvicorn in a
    # thread, tests); only the event loop's thread uses it after that, one call at a time.
    connection = sqlite3.connect(db_path, timeout=30.0, check_same_thread=False)
    # In WAL mode (set by the store's migrations), NORMAL syncs at checkpoints instead of
    # at every commit: a crash of the process loses nothing committed, but a power failure
    # or OS crash may lose the last commits (runs then read as never stored or unfinished).
    connection.execute("PRAGMA synchronous=NORMAL")
    return connection


# PostgresWorkflowStore is exported only from a private module in 0.8 (asyncpg is an
# optional extra there); pyproject.toml pins llama-agents-server below 0.9.
class PostgresRunStore(_RunStateInMemory, PostgresWorkflowStore):
    """The server's PostgreSQL store (asyncpg, LISTEN/NOTIFY), run state in memory."""


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
        where, password = _split_password(target)
        register_secret(password)  # asyncpg's errors may quote the URL
        return StoreChoice(PostgresRunStore(target), "postgresql", where)
    if "://" in target:
        raise ConfigError(
            f"server.store {target.split('://')[0]}:// is not a store crag knows; "
            "give a SQLite file path or a postgresql:// URL."
        )
    path = Path(target)
    if path.is_dir():
        raise ConfigError(f"server.store {path} is a folder; give a SQLite file such as {path / 'server.db'}.")
    path.parent.mkdir(parents=True, exist_ok=True)
    return StoreChoice(SqliteRunStore(str(path)), "sqlite", str(path))


def _split_password(url: str) -> tuple[str, str | None]:
    """The URL without its password, and the password."""
    scheme, _, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url, None
    user, _, password = credentials.partition(":")
    return f"{scheme}://{user}@{host}", password
