"""The run store: where `crag serve` keeps its runs, llama-agents-server's SQLite or
PostgreSQL workflow store, chosen by `[server] store` (`store_for`).

Handlers (status, result, error) and every streamed event go to the store, so a finished
run's result and trace outlive the process, and several processes can share PostgreSQL.
A run's working state between steps stays in the memory of the process running it: the
state changes several times per step, and writing each change through the store would cost
a serialization and a write on the event loop each time, while a run takes
milliseconds to seconds and never waits for outside input, so there is nothing worth
resuming mid-run. (`RunState` itself round-trips through JSON; this is about cost.)

    sqlite.py      SQLite beside the index by default: one connection, on its own thread (writer.py)
    postgres.py    PostgreSQL from a URL, shared by several servers; each call bounded in time
    unrecorded.py  a run's end the store refused to write, told at once, written by the orphan sweep
    listing.py     GET /handlers, a page at a time, read with a keyset query on the store's tables
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from crag.app.grade_cache import POSTGRES_SCHEMES
from crag.app.server.store.postgres import PostgresRunStore
from crag.app.server.store.sqlite import SqliteRunStore
from crag.errors import ConfigError, hide_password

if TYPE_CHECKING:
    from llama_agents.server import AbstractWorkflowStore

    from crag.config import Settings

__all__ = ["PostgresRunStore", "SqliteRunStore", "StoreChoice", "store_for"]


@dataclass(frozen=True)
class StoreChoice:
    """The store, and how to name it: its kind for /health, `where` for the startup line."""

    store: AbstractWorkflowStore
    kind: str  # "sqlite" or "postgresql"
    where: str  # the file, or the database URL without its password


def store_for(settings: Settings) -> StoreChoice:
    """The store `[server] store` names: a postgresql:// URL, a SQLite file, or by default
    `server.db` in the index folder, so that a laptop needs no database server. In the folder,
    not beside it: two servers of two index folders in one parent folder would otherwise share
    one store, and each would list and read the other's runs. A store named on purpose may be
    shared; every read of it is still limited to the caller's collections (crag.app.access)."""
    target = settings.server.store or str(settings.index.path / "server.db")
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
