"""`GET /handlers`, a page at a time: the runs newest first, `limit` of them (default 100, at
most 1,000), and `before=ID` for the page after the run `ID`.

The server's own route (llama-agents-server 0.8) has filters but no limit: it reads every
run with its result, on the event loop: with a few thousand finished runs, megabytes and
seconds, and /health waited meanwhile. This route answers the same query parameters (`status`,
`workflow_name`, repeated or not) and the same shape (`{"handlers": [...]}`), plus
`"next_before"`: the `before` for the next page, or null on the last one. The page's ids are
read with a keyset query, `ORDER BY ... LIMIT` after the `before` run's start time and id, so
a page costs the same however long the history: on SQLite on a connection of its own in a
worker thread, on PostgreSQL on the store's async pool. The store's own `query` then reads
those runs by id (its rows are its business, not crag's), and the page is turned into JSON
in a worker thread. Any other store (memory, in tests) is read whole and cut in a worker
thread.

Only the runs of the collections the caller may ask are listed (crag.app.access): the
`workflow_name` filter is cut to them, and a `before` run the caller may not see is a 404, as
one that does not exist, so that no page's boundary is another collection's run.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llama_agents.server import AbstractWorkflowStore, HandlerQuery, PersistentHandler
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crag._bounded import given_up_after
from crag._compat.llama_agents import handler_data_from_persistent, postgres_pool
from crag.app.access import principal_of
from crag.app.server.store.postgres import HANDLERS_TABLE, POSTGRES_TIMEOUT, PostgresRunStore
from crag.app.server.store.sqlite import SqliteRunStore

if TYPE_CHECKING:
    from crag.app.runs import RunService

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
STATUSES = ("running", "completed", "failed", "cancelled")


def handlers_route(store: AbstractWorkflowStore, runs: RunService | None = None) -> Route:
    """The paginated `GET /handlers`, to go ahead of the server's own; with `runs`, of the
    caller's collections only."""

    async def handlers(request: Request) -> Response:
        params = request.query_params
        try:
            limit = int(params.get("limit", DEFAULT_LIMIT))
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_LIMIT:
            return JSONResponse(
                {"detail": f"limit must be a whole number from 1 to {MAX_LIMIT}."}, status_code=400
            )
        before = params.get("before") or None
        names = _listed(params.getlist("workflow_name"))
        if runs is not None:
            principal = principal_of(request.scope)
            visible = [served.workflow_name for served in runs.visible(principal)]
            names = visible if names is None else [name for name in names if name in visible]
            if before is not None and await runs.stored(before, principal) is None:
                return JSONResponse({"detail": f"No run {before!r} to list the runs before."}, status_code=404)
        query = HandlerQuery(status_in=_listed(params.getlist("status"), STATUSES), workflow_name_in=names)
        if isinstance(store, SqliteRunStore):
            ids = await asyncio.to_thread(_sqlite_page, store.db_path, query, limit, before)
        elif isinstance(store, PostgresRunStore):
            ids = await given_up_after(
                POSTGRES_TIMEOUT,
                _postgres_page(store, query, limit, before),
                "the postgresql run store",
            )
        else:
            found = await store.query(query)
            ids = await asyncio.to_thread(_page_of, found, limit, before)
        if ids is None:
            return JSONResponse(
                {"detail": f"No run {before!r} to list the runs before."}, status_code=404
            )
        found = await store.query(HandlerQuery(handler_id_in=ids[:limit])) if ids else []
        next_before = ids[limit - 1] if len(ids) > limit else None
        body = await asyncio.to_thread(_json, found, ids, next_before)
        return Response(body, media_type="application/json")

    return Route("/handlers", handlers, methods=["GET"])


def _listed(values: list[str], allowed: tuple[str, ...] | None = None) -> list[Any] | None:
    """A repeated query parameter as the server reads it: blanks dropped, None if none left,
    unknown statuses dropped (none known left: no run matches)."""
    kept = [v.strip() for v in values if v.strip()]
    if not kept:
        return None
    return [v for v in kept if v in allowed] if allowed else kept


def _where(query: HandlerQuery, mark: Callable[[int], str]) -> tuple[list[str], list[Any]] | None:
    """The SQL for the route's two filters, `mark(n)` the n-th value's placeholder; None when a
    filter lists nothing, so no run matches."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, values in (("status", query.status_in), ("workflow_name", query.workflow_name_in)):
        if values is None:
            continue
        if not values:
            return None
        marks = ", ".join(mark(len(params) + i + 1) for i in range(len(values)))
        clauses.append(f"{column} IN ({marks})")
        params.extend(values)
    return clauses, params


def _json(found: list[PersistentHandler], ids: list[str], next_before: str | None) -> bytes:
    """The page in the order of `ids` (a run deleted since its id was read is left out)."""
    by_id = {h.handler_id: h for h in found}
    page = [by_id[i] for i in ids if i in by_id]
    items = [handler_data_from_persistent(h).model_dump(mode="json") for h in page]
    return json.dumps({"handlers": items, "next_before": next_before}).encode()


def _page_of(found: list[PersistentHandler], limit: int, before: str | None) -> list[str] | None:
    ordered = sorted(
        found,
        key=lambda h: (h.started_at.isoformat() if h.started_at else "", h.handler_id),
        reverse=True,
    )
    if before is not None:
        at = next((i for i, h in enumerate(ordered) if h.handler_id == before), None)
        if at is None:
            return None
        ordered = ordered[at + 1 :]
    return [h.handler_id for h in ordered[: limit + 1]]


def _sqlite_page(
    db_path: str, query: HandlerQuery, limit: int, before: str | None
) -> list[str] | None:
    """The page's ids, one more than `limit` (to tell whether another page follows), or None
    when `before` names no run."""
    spec = _where(query, lambda _: "?")
    if spec is None:
        return []
    clauses, params = spec
    connection = sqlite3.connect(db_path, timeout=30.0)  # a reader: WAL never blocks it
    try:
        if before is not None:
            row = connection.execute(
                "SELECT COALESCE(started_at, ''), handler_id FROM handlers WHERE handler_id = ?",
                (before,),
            ).fetchone()
            if row is None:
                return None
            clauses.append("(COALESCE(started_at, ''), handler_id) < (?, ?)")
            params.extend(row)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = connection.execute(
            f"SELECT handler_id FROM handlers{where} "  # clauses are crag's, values bound
            "ORDER BY COALESCE(started_at, '') DESC, handler_id DESC LIMIT ?",
            (*params, limit + 1),
        ).fetchall()
    finally:
        connection.close()
    return [row[0] for row in rows]


async def _postgres_page(
    store: PostgresRunStore, query: HandlerQuery, limit: int, before: str | None
) -> list[str] | None:
    """As `_sqlite_page`, on the store's pool. Started times compare as timestamps; a run
    without one sorts last, as the empty string does on SQLite."""
    spec = _where(query, lambda n: f"${n}")
    if spec is None:
        return []
    clauses, params = spec
    started = "COALESCE(started_at, '-infinity'::timestamptz)"
    pool = await postgres_pool(store)
    async with pool.acquire() as connection:
        if before is not None:
            row = await connection.fetchrow(
                f"SELECT {started} AS started, handler_id FROM {HANDLERS_TABLE} "
                "WHERE handler_id = $1",
                before,
            )
            if row is None:
                return None
            n = len(params)
            clauses.append(f"({started}, handler_id) < (${n + 1}, ${n + 2})")
            params.extend((row["started"], row["handler_id"]))
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = await connection.fetch(
            f"SELECT handler_id FROM {HANDLERS_TABLE}{where} "  # clauses are crag's, values bound
            f"ORDER BY {started} DESC, handler_id DESC LIMIT ${len(params) + 1}",
            *params,
            limit + 1,
        )
    return [row["handler_id"] for row in rows]
