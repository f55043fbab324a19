"""Where the server keeps its runs: llama-agents-server's SQLite or PostgreSQL workflow store.

Handlers (status, result, error) and every streamed event go to the store, so a finished
run's result and trace outlive the process, and several processes can share PostgreSQL.
A run's working state between steps stays in the memory of the process running it: the
state changes several times per step, and writing each change through the store costs a
commit that blocks the event loop (about 25 ms on SQLite here), while a run takes
milliseconds to seconds and never waits for outside input, so there is nothing worth
resuming mid-run. (`RunState` itself round-trips through JSON; this is about cost.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_agents.server import AbstractWorkflowStore, PersistentHandler, SqliteWorkflowStore
from llama_agents.server._store.abstract_workflow_store import is_terminal_status
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
    """The server's SQLite store, run state in memory."""


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
