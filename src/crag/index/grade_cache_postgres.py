"""The grade cache in PostgreSQL, for `crag serve` on a postgresql:// store: every server that
shares the database shares the grades too.

The same keys (`grade_key`) and the same behaviour as the SQLite cache: a bounded map from key
to score (a row that holds no grade, NaN or 5.0, is a miss: `usable_score`), the least
recently used (a `used` timestamp, the database's clock, so that servers' clocks need not
agree) dropped first. One table, `crag_grades`, created if missing.

Async (asyncpg, like the run store): a pool per event loop, opened on first use on the loop
that uses it, since an asyncpg pool belongs to the loop it was made on. A cache is never a
reason for a question to fail: a lookup the database does not answer within `timeout` (down,
frozen, refusing) is a miss and a write is dropped, with one warning per outage; for
`retry_after` seconds after that the database is not asked at all, so that a frozen database
costs one wait, not one per question.

Several servers share the table safely: hits are marked used without waiting on rows another
server holds, writes lock rows in key order, and one server at a time trims the table back to
`max_entries` (one scan of the `used` index per write; the others skip the trim, so the bound
may be passed briefly by writes made at the same moment).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, TypeVar

from crag._bounded import given_up_after, store_errors
from crag.errors import hide_password, redact
from crag.index.grade_cache import CacheStats, usable_score

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger(__name__)

T = TypeVar("T")
TABLE = "crag_grades"
_DDL = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    key TEXT PRIMARY KEY,
    score DOUBLE PRECISION NOT NULL,
    used TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS {TABLE}_used ON {TABLE} (used);
"""
# Hits are marked used with SKIP LOCKED: a row another server is touching or trimming right now
# is simply not touched again, so lookups never wait on each other or deadlock.
_GET = f"""
WITH touched AS (
    UPDATE {TABLE} SET used = clock_timestamp() WHERE key IN (
        SELECT key FROM {TABLE} WHERE key = ANY($1::text[]) ORDER BY key FOR UPDATE SKIP LOCKED)
)
SELECT key, score FROM {TABLE} WHERE key = ANY($1::text[])
"""
# Rows in key order: two servers writing overlapping grades lock them in the same order.
_PUT = f"""
INSERT INTO {TABLE} (key, score, used)
SELECT k, s, clock_timestamp() FROM unnest($1::text[], $2::float8[]) AS t(k, s) ORDER BY k
ON CONFLICT (key) DO UPDATE SET score = EXCLUDED.score, used = EXCLUDED.used
"""
_TRIM = f"DELETE FROM {TABLE} WHERE key IN (SELECT key FROM {TABLE} ORDER BY used DESC, key OFFSET $1)"
# Advisory lock ids (any constant bigints): one for creating the table, one for trimming it.
_DDL_LOCK, _TRIM_LOCK = 0x63726167_0001, 0x63726167_0002


class PostgresGradeCache:
    """A bounded, shared map from `grade_key` to a score in [0, 1], in PostgreSQL.

    Example:
        cache = PostgresGradeCache("postgresql://crag@db/crag", max_entries=100_000)
        known = await cache.aget_many(keys)   # {} while the database is down
    """

    def __init__(self, dsn: str, *, max_entries: int = 100_000, timeout: float = 2.0,
                 retry_after: float = 30.0, pool_size: int = 4) -> None:
        if max_entries <= 0:
            raise ValueError(f"max_entries must be positive, not {max_entries}")
        self.dsn = dsn
        self.where = hide_password(dsn)  # for messages, without its password (either form)
        self.max_entries = max_entries
        self.timeout = timeout
        self.retry_after = retry_after
        self.pool_size = pool_size
        self.enabled = True
        self._pools: dict[asyncio.AbstractEventLoop, asyncio.Task[asyncpg.Pool]] = {}
        self._down_until = 0.0
        self._warned = False

    # -- for grading: never raises --------------------------------------------------------

    async def aget_many(self, keys: Sequence[str]) -> dict[str, float]:
        """The cached scores among `keys` (a miss is absent); hits count as recently used."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}

        async def read(db: asyncpg.Pool) -> dict[str, float]:
            scores = ((row["key"], usable_score(row["score"])) for row in await db.fetch(_GET, keys))
            return {key: score for key, score in scores if score is not None}  # else a miss, replaced

        return await self._guarded("read", read, {})

    async def aput_many(self, scores: Mapping[str, float]) -> None:
        """Keep `scores`; past `max_entries`, the least recently used grades go first."""
        if not scores:
            return
        kept = {k: s for k, s in ((k, usable_score(min(max(float(v), 0.0), 1.0))) for k, v in scores.items())
                if s is not None}  # NaN survives the clamp: not kept
        if not kept:
            return
        keys, values = list(kept), list(kept.values())

        async def write(db: asyncpg.Pool) -> None:
            async with db.acquire() as connection:
                await connection.execute(_PUT, keys, values)
                # One trimmer at a time across servers; the others skip it (the next write
                # trims), so that writers never queue behind each other's trims.
                async with connection.transaction():
                    if await connection.fetchval("SELECT pg_try_advisory_xact_lock($1)", _TRIM_LOCK):
                        await connection.execute(_TRIM, self.max_entries)

        await self._guarded("write", write, None)

    # -- for `crag cache`: raises, so that a database that is down is not reported empty ----

    async def aclear(self) -> int:
        """Forget every grade; the number forgotten."""
        status = await self._bounded(self._with_pool(lambda db: db.execute(f"DELETE FROM {TABLE}")))
        return int(status.split()[-1])

    async def astats(self) -> CacheStats:
        row = await self._bounded(self._with_pool(lambda db: db.fetchrow(
            f"SELECT count(*) AS n, pg_total_relation_size('{TABLE}') AS size FROM {TABLE}")))
        return CacheStats(f"{self.where} table {TABLE}", row["n"], self.max_entries, row["size"], self.enabled)

    async def aclose(self) -> None:
        """Close the running loop's pool (the others' belong to loops that are gone or busy)."""
        task = self._pools.pop(asyncio.get_running_loop(), None)
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return
        pool = task.result()
        try:
            await self._bounded(pool.close())
        except store_errors():  # a database that does not answer: just drop the connections
            pool.terminate()

    # -- the pool, and what goes wrong with it ----------------------------------------------

    async def _guarded(self, what: str, work: Callable[[asyncpg.Pool], Awaitable[T]], default: T) -> T:
        if not self.enabled or time.monotonic() < self._down_until:
            return default
        try:
            result = await self._bounded(self._with_pool(work))
        except Exception as exc:  # noqa: BLE001 - whatever the database says, grading goes on
            self._down_until = time.monotonic() + self.retry_after
            if not self._warned:
                self._warned = True
                log.warning("grade cache %s did not answer a %s (%s: %s): grading goes on without it, "
                            "trying again after %g s", self.where, what, type(exc).__name__,
                            redact(str(exc)), self.retry_after)  # asyncpg's errors may quote the URL
            return default
        if self._warned:
            self._warned = False
            log.info("grade cache %s answers again", self.where)
        return result

    async def _with_pool(self, work: Callable[[asyncpg.Pool], Awaitable[T]]) -> T:
        return await work(await self._pool())

    async def _pool(self) -> asyncpg.Pool:
        loop = asyncio.get_running_loop()
        for other in [other for other in self._pools if other.is_closed()]:
            del self._pools[other]  # a pool on a loop that is gone cannot be used, nor closed
        task = self._pools.get(loop)
        if task is None:  # one opening, awaited by every lookup that comes meanwhile
            task = self._pools[loop] = loop.create_task(self._open())
            task.add_done_callback(lambda done: self._forget_failed(loop, done))
        return await asyncio.shield(task)

    def _forget_failed(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        if (task.cancelled() or task.exception() is not None) and self._pools.get(loop) is task:
            del self._pools[loop]  # failed: the next call tries again

    async def _open(self) -> asyncpg.Pool:
        import asyncpg

        pool = await asyncpg.create_pool(self.dsn, min_size=0, max_size=self.pool_size,
                                         timeout=self.timeout, command_timeout=self.timeout)
        with ExitStack() as unless_ready:
            unless_ready.callback(pool.terminate)
            async with pool.acquire() as connection, connection.transaction():
                # Two servers starting at once would race CREATE TABLE IF NOT EXISTS.
                await connection.execute("SELECT pg_advisory_xact_lock($1)", _DDL_LOCK)
                await connection.execute(_DDL)
            unless_ready.pop_all()  # ready: kept
        return pool

    async def _bounded(self, work: Awaitable[T]) -> T:
        """`await work`, or TimeoutError after `timeout`, the work left to end by itself (see
        crag._bounded: cancelling asyncpg mid-query on a frozen database would not bound it)."""
        return await given_up_after(self.timeout, work, "the grade cache")
