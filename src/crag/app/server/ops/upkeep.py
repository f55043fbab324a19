"""What keeps a long-lived `crag serve` honest: health probes with a time limit, run history
pruned to `[server] keep_runs` / `keep_days`, and no run left `running` by a server that died.

Orphans. Each server has an id and, every few seconds, writes a heartbeat row into the run
store (`crag_servers`: id, time, the run ids it is running). A run marked `running` that no
server with a fresh heartbeat (younger than `[server] orphan_after`) claims, and that started
longer ago than that, was cut off (kill -9, a lost machine, a failed store write) and is marked
failed, by whichever server sweeps next: at startup and at every beat. A run this process
started but no longer runs (its final store write failed) is failed the same way.

Health. The store's probe is a heartbeat: a real write, in a thread for SQLite, on a fresh
connection for PostgreSQL, given up (not waited for, bounded.py) after `PROBE_TIMEOUT`. A
read would pass on a full disk (SQLite), and taking the lock without writing would too; a
probe of the store's own pool would queue behind the requests a frozen database holds.
Callers at the same moment share one probe; a run's start (crag.app.runs) also takes an
answer up to `PROBE_REUSE` seconds old, so that a burst of runs costs one probe a second.

Blocking work (SQLite, file system) runs in a thread; each probe has a time limit.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

from llama_agents.server import AbstractWorkflowStore, HandlerQuery
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from crag._bounded import StoreTimeout, given_up_after, store_errors
from crag._logs import Outages

ORPHANED = "the server running it stopped (or could not record its end) before the run finished; ask again"
PROBE_TIMEOUT = 2.0
PROBE_REUSE = 1.0  # seconds one probe's answer stands for every caller
TERMINAL = ("completed", "failed", "cancelled")
_HEARTBEAT_DDL = "CREATE TABLE IF NOT EXISTS crag_servers (server_id TEXT PRIMARY KEY, beat DOUBLE PRECISION NOT NULL, runs TEXT NOT NULL)"


class LiveRuns:
    """The run ids this process is running (kept up by `crag.app.runs.RunService`)."""

    def __init__(self) -> None:
        self.server_id = uuid.uuid4().hex[:12]
        self.ids: set[str] = set()


async def within(seconds: float, blocking: Callable[[], Any]) -> Any:
    """`blocking()` in a thread, given up (not waited for) after `seconds`."""
    return await asyncio.wait_for(asyncio.to_thread(blocking), seconds)


class Upkeep:
    """Probes, pruning and the orphan sweep for one store (`kind`: "sqlite" or "postgresql")."""

    def __init__(self, store: AbstractWorkflowStore, kind: str, where: str, *, live: LiveRuns,
                 keep_runs: int, keep_days: float, orphan_after: float) -> None:
        self.store, self.kind, self.live = store, kind, live
        self.target = where if kind == "sqlite" else getattr(store, "_dsn", None) or where
        self.keep_runs, self.keep_days, self.orphan_after = keep_runs, keep_days, orphan_after
        self._probe: asyncio.Task[str | None] | None = None  # the last store probe, shared
        self._probed_at = -PROBE_REUSE

    # --- health ---------------------------------------------------------------------------

    async def store_problem(self, reuse: float = 0.0) -> str | None:
        """Why the store cannot record runs now, or None. A probe in progress is joined; a
        finished one's answer is taken if it is at most `reuse` seconds old."""
        if self._probe is None or (self._probe.done() and time.monotonic() - self._probed_at > reuse):
            self._probed_at = time.monotonic()
            self._probe = asyncio.create_task(self._probe_store())
        return await asyncio.shield(self._probe)  # a caller that goes away leaves it to the others

    async def _probe_store(self) -> str | None:
        try:
            await self.beat(PROBE_TIMEOUT)
        except (asyncio.TimeoutError, StoreTimeout):
            return f"the {self.kind} store did not answer within {PROBE_TIMEOUT:g} s"
        except sqlite3.Error as exc:  # its messages name no path: "database or disk is full"
            return f"the {self.kind} store cannot record runs: {exc}"
        except store_errors() as exc:  # any of them makes this process unfit
            return f"the {self.kind} store is unreachable: {type(exc).__name__}"
        return None

    # --- pruning --------------------------------------------------------------------------

    async def prune(self) -> int:
        """Delete finished runs beyond the newest `keep_runs` or older than `keep_days`."""
        cutoff = datetime.now(timezone.utc) - timedelta(days=self.keep_days)
        if self.kind == "sqlite":
            return await within(30.0, lambda: self._sqlite_prune(cutoff.isoformat()))
        finished = await self.store.query(HandlerQuery(status_in=list(TERMINAL)))  # type: ignore[arg-type]
        finished.sort(key=lambda h: h.completed_at or h.updated_at or cutoff, reverse=True)
        doomed = [h.handler_id for n, h in enumerate(finished)
                  if n >= self.keep_runs or (h.completed_at or h.updated_at or cutoff) < cutoff]
        return await self.store.delete(HandlerQuery(handler_id_in=doomed)) if doomed else 0

    def _sqlite_prune(self, cutoff: str) -> int:
        with _sqlite(self.target, 30.0) as connection:
            marks = ",".join("?" * len(TERMINAL))
            deleted = connection.execute(
                f"DELETE FROM handlers WHERE status IN ({marks}) AND (COALESCE(completed_at, updated_at) < ? "
                f"OR handler_id NOT IN (SELECT handler_id FROM handlers WHERE status IN ({marks}) "
                "ORDER BY COALESCE(completed_at, updated_at) DESC LIMIT ?))",
                (*TERMINAL, cutoff, *TERMINAL, self.keep_runs),
            ).rowcount
            if deleted:
                connection.execute("DELETE FROM events WHERE run_id NOT IN "
                                   "(SELECT run_id FROM handlers WHERE run_id IS NOT NULL)")
            return deleted

    # --- heartbeat and orphans ------------------------------------------------------------

    async def beat_and_sweep(self) -> int:
        """Write this server's heartbeat, then fail the runs no live server claims."""
        return await self.sweep(await self.beat())

    async def beat(self, limit: float = 10.0) -> set[str]:
        """Write this server's heartbeat, within `limit` seconds; the run ids that live
        servers claim."""
        now = time.time()
        runs = sorted(self.live.ids)
        if self.kind == "sqlite":
            # SQLite's own wait for a lock ends first, so that a lock says "database is locked".
            return await within(limit, lambda: self._sqlite_beat(now, runs, 0.75 * limit))
        return await given_up_after(limit, self._postgres_beat(now, runs, limit), "the postgresql store")

    async def sweep(self, claimed: set[str]) -> int:
        """Fail the runs marked running that no live server claims; how many."""
        cutoff = datetime.now(timezone.utc) - timedelta(seconds=self.orphan_after)
        failed = 0
        unrecorded = getattr(self.store, "unrecorded", None)
        for run_id, error in list(unrecorded.errors.items()) if unrecorded else ():
            # Ended here while the store refused the write (store/unrecorded.py): write it now.
            await self.store.update_handler_status(run_id, status="failed", error=error)
            unrecorded.errors.pop(run_id, None)  # written (or its row never was: nothing to show)
            failed += 1
        for handler in await self.store.query(HandlerQuery(status_in=["running"])):
            if handler.run_id is None or handler.run_id in claimed or handler.run_id in self.live.ids:
                continue
            if handler.started_at is not None and handler.started_at > cutoff:
                continue  # just started: its server may not have beaten since
            await self.store.update_handler_status(handler.run_id, status="failed", error=ORPHANED)
            failed += 1
        return failed

    def _sqlite_beat(self, now: float, runs: list[str], busy: float = 10.0) -> set[str]:
        with _sqlite(self.target, busy) as connection:
            connection.execute(_HEARTBEAT_DDL)
            connection.execute("INSERT OR REPLACE INTO crag_servers VALUES (?, ?, ?)",
                               (self.live.server_id, now, json.dumps(runs)))
            connection.execute("DELETE FROM crag_servers WHERE beat < ?", (now - 10 * self.orphan_after,))
            rows = connection.execute("SELECT runs FROM crag_servers WHERE beat >= ?",
                                      (now - self.orphan_after,)).fetchall()
        return {run for (text,) in rows for run in json.loads(text)}

    async def _postgres_beat(self, now: float, runs: list[str], limit: float) -> set[str]:
        import asyncpg

        # Its own short-lived connection, not the store's pool: a pool a frozen database holds
        # would queue the beat behind the requests it holds. Each step times out by itself
        # too, so that a beat given up (bounded.py) ends rather than lingers.
        connection = await asyncpg.connect(self.target, timeout=limit, command_timeout=limit)
        try:
            await connection.execute(_HEARTBEAT_DDL)
            await connection.execute(
                "INSERT INTO crag_servers VALUES ($1, $2, $3) ON CONFLICT (server_id) "
                "DO UPDATE SET beat = EXCLUDED.beat, runs = EXCLUDED.runs",
                self.live.server_id, now, json.dumps(runs))
            await connection.execute("DELETE FROM crag_servers WHERE beat < $1", now - 10 * self.orphan_after)
            rows = await connection.fetch("SELECT runs FROM crag_servers WHERE beat >= $1", now - self.orphan_after)
        finally:
            await connection.close(timeout=limit)
        return {run for row in rows for run in json.loads(row["runs"])}

    async def leave(self) -> None:
        """Drop this server's heartbeat on a clean stop, so its runs are not waited for."""
        self.live.ids.clear()
        try:
            await self.beat_and_sweep()
        except store_errors():  # stopping anyway
            pass

    # --- the background loop --------------------------------------------------------------

    async def run_forever(self, every: float, prune_every: float = 60.0) -> None:
        last_prune = 0.0
        # A store that is down fails every beat (a few a second in tests): said once, then
        # once a minute, and when it works again (crag._logs).
        outages = Outages(lambda line: print(f"crag: {line}", flush=True))
        while True:
            for job in (self.beat_and_sweep, *((self.prune,) if time.monotonic() - last_prune > prune_every else ())):
                what = f"upkeep ({job.__name__})"
                try:
                    await job()
                except Exception as exc:
                    outages.failed(what, f"{type(exc).__name__}: {exc}")
                else:
                    outages.passed(what)
            if time.monotonic() - last_prune > prune_every:
                last_prune = time.monotonic()
            await asyncio.sleep(every)

    @asynccontextmanager
    async def running(self, every: float, also: Callable[[], Awaitable[Any]] | None = None) -> AsyncIterator[None]:
        """Upkeep every `every` seconds (and `also()`, a coroutine, beside it) for the length of
        the block; this server leaves the heartbeat table when it ends."""
        tasks = [asyncio.create_task(self.run_forever(every))]
        if also is not None:
            tasks.append(asyncio.create_task(also()))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await self.leave()


class _sqlite:
    """A short-lived connection of its own (used from a worker thread), closed on exit."""

    def __init__(self, path: str, timeout: float) -> None:
        self.connection = sqlite3.connect(path, timeout=timeout)

    def __enter__(self) -> sqlite3.Connection:
        return self.connection

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.connection.commit()
        self.connection.close()


class CancelReport:
    """`POST /handlers/{id}/cancel` says what happened to a run that is not running here: a
    finished run's status (409), a run whose end the store refused (failed, and why), or an
    orphan marked failed; a run this process runs, or an unknown one, goes on to the server's
    own route."""

    def __init__(self, app: ASGIApp, upkeep: Upkeep) -> None:
        self.app = app
        self.upkeep = upkeep

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope["method"] != "POST" or not path.endswith("/cancel") \
                or not path.startswith("/handlers/") or "purge=true" in scope.get("query_string", b"").decode():
            await self.app(scope, receive, send)
            return
        handler_id = path[len("/handlers/"):-len("/cancel")]
        found = await self.upkeep.store.query(HandlerQuery(handler_id_in=[handler_id]))
        # A run read as ended is reported, even while this process still winds it up (its last
        # write refused and being retried, store/unrecorded.py): there is nothing left to cancel.
        if not found or (found[0].status == "running" and found[0].run_id in self.upkeep.live.ids):
            await self.app(scope, receive, send)
            return
        handler = found[0]
        if handler.status == "running":
            await self.upkeep.beat_and_sweep()  # claimed by a live server elsewhere, or failed now
            handler = (await self.upkeep.store.query(HandlerQuery(handler_id_in=[handler_id])))[0]
            if handler.status == "running":
                await self.app(scope, receive, send)
                return
        body = {"status": handler.status, "detail": f"The run had already ended ({handler.status})"
                + (f": {handler.error}" if handler.error else "") + "; nothing to cancel."}
        await JSONResponse(body, status_code=409)(scope, receive, send)
