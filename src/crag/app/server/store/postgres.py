"""The run store on PostgreSQL (asyncpg, LISTEN/NOTIFY): one database shared by several
servers, each call bounded in time (bounded.py).

A run's working state between steps stays in memory (the room's docstring, `__init__.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from llama_agents.client.protocol.serializable_events import EventEnvelopeWithMetadata
from llama_agents.server import HandlerQuery, PersistentHandler

from crag._bounded import given_up_after
from crag._compat.llama_agents import PostgresWorkflowStore, RunStateInMemory, StoredEvent
from crag.app.server.store.unrecorded import UnrecordedEnds

# How long a PostgreSQL read or write may take before its caller is told the store did not
# answer (bounded.py): a frozen database must not hold a request, or a run, for ever.
POSTGRES_TIMEOUT = 5.0
HANDLERS_TABLE = "wf_handlers"  # named here, not left to the store's default: store/listing.py reads it
T = TypeVar("T")


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
        except Exception as exc:  # any failure: noted as unrecorded, then re-raised
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
