"""Private parts of llama-agents-server (written against 0.8.0) that crag's service store builds on.

What crag could not reach through the server's public package (`llama_agents.server`: the
store classes, `HandlerQuery`, `PersistentHandler`), and why:

- the query and event types its own stores use (`StoredEvent`, `StoredTick`,
  `is_terminal_status`), the grace a resumed run is given, the helper that turns a stored
  handler into the API's view of it, and `PostgresWorkflowStore`: exported only from
  private modules;
- `RunStateInMemory`: a store keeps each run's state through `_build_state_store` (the
  abstract hook every store implements) in `_state_store_cache`, which holds it weakly,
  and `_evict_run_state_stores` drops it; nothing public holds a state until its run ends;
- `SqliteOnOneConnection`: the SQLite store opens a connection per call (`_connect`), and
  its public `single_connection` mode turns SQLite's file locking off; its methods are
  coroutines whose bodies never await, run here to their end on the caller's thread; and
  its readers wait on per-run conditions (`_conditions`) that only its own `append_event`
  wakes;
- `postgres_pool`: the PostgreSQL store's pool (`_ensure_pool`), which has no public
  accessor; a pool of crag's own would double the connections each server holds.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from llama_agents.server import PersistentHandler, SqliteWorkflowStore
from llama_agents.server._runtime.persistence_runtime import RESUME_FRESH_HANDLER_GRACE
from llama_agents.server._service import handler_data_from_persistent
from llama_agents.server._store.abstract_workflow_store import (
    StoredEvent,
    StoredTick,
    is_terminal_status,
)
from llama_agents.server._store.postgres_workflow_store import PostgresWorkflowStore
from workflows.context.serializers import BaseSerializer
from workflows.context.state_store import DictState, InMemoryStateStore

__all__ = [
    "RESUME_FRESH_HANDLER_GRACE",
    "PostgresWorkflowStore",
    "RunStateInMemory",
    "SqliteOnOneConnection",
    "StoredEvent",
    "StoredTick",
    "handler_data_from_persistent",
    "is_terminal_status",
    "postgres_pool",
]


class RunStateInMemory:
    """Mixed in ahead of a workflow store: each run's step-to-step state in memory, held
    until the run ends (the base class holds it weakly, for stores that reload it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._state_store_cache = {}

    async def update(self, handler: PersistentHandler) -> None:
        try:
            await super().update(handler)  # type: ignore[misc]
        finally:  # a run that ended needs its state no more, recorded or not
            if handler.run_id and is_terminal_status(handler.status):
                self.forget_run_state(handler.run_id)

    def forget_run_state(self, run_id: str) -> None:
        self._evict_run_state_stores(run_id)  # type: ignore[attr-defined]

    def _build_state_store(
        self,
        run_id: str,
        namespace: tuple[str, ...],
        state_type: type[Any] | None,
        serializer: BaseSerializer | None,
    ) -> InMemoryStateStore[Any]:
        return InMemoryStateStore(state_type() if state_type else DictState())


class SqliteOnOneConnection(RunStateInMemory, SqliteWorkflowStore):
    """The server's SQLite store with its SQL on one connection, `connect(db_path)`, used by
    whichever thread calls `run_base` (one at a time: the caller sees to that)."""

    def __init__(self, db_path: str, connect: Callable[[str], sqlite3.Connection]) -> None:
        super().__init__(db_path)  # migrations (and WAL) on a connection of their own
        self.connection = connect(db_path)

    def run_base(self, name: str, *args: Any) -> Any:
        """The base class's method `name(*args)`, run to its end on this thread."""
        coroutine = getattr(SqliteWorkflowStore, name)(self, *args)
        try:
            coroutine.send(None)
        except StopIteration as done:
            return done.value
        coroutine.close()
        raise RuntimeError(f"SqliteWorkflowStore.{name} awaited: it cannot run on this thread")

    async def wake_readers(self, run_id: str) -> None:
        """Wake `subscribe_events` for `run_id` (else it looks again after `poll_interval`)."""
        condition = self._conditions.get(run_id)
        if condition is not None:
            async with condition:
                condition.notify_all()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with ExitStack() as unless_done:  # a shared connection must not keep a half-done write open
            unless_done.callback(self.connection.rollback)
            yield self.connection
            unless_done.pop_all()


async def postgres_pool(store: PostgresWorkflowStore) -> Any:
    """The store's asyncpg pool, the store started first if need be."""
    return await store._ensure_pool()
