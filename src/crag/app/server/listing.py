"""`GET /handlers`, a page at a time: the runs newest first, `limit` of them (default 100, at
most 1,000), and `before=ID` for the page after the run `ID`.

The server's own route (llama-agents-server 0.8) has filters but no limit: it reads every
run with its result, on the event loop: with a few thousand finished runs, megabytes and
seconds, and /health waited meanwhile. This route answers the same query parameters (`status`,
`workflow_name`, repeated or not) and the same shape (`{"handlers": [...]}`), plus
`"next_before"`: the `before` for the next page, or null on the last one. On SQLite the page
is read with `ORDER BY ... LIMIT` on a connection of its own, and turned into JSON, in a
worker thread. On PostgreSQL the same keyset query runs on the store's async pool (the
`before` run's start time and id bound the page, so a page costs the same however long the
history), and the page is serialised in a worker thread. Any other store (memory, in tests)
is read whole and cut in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

from llama_agents.server import AbstractWorkflowStore, HandlerQuery, PersistentHandler
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crag._compat.llama_agents import handler_data_from_persistent
from crag._bounded import given_up_after
from crag.app.server.stores import POSTGRES_TIMEOUT, PostgresRunStore, SqliteRunStore

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
STATUSES = ("running", "completed", "failed", "cancelled")
COLUMNS = (
    "handler_id, workflow_name, status, run_id, error, result, "
    "started_at, updated_at, completed_at, idle_since"
)


def handlers_route(store: AbstractWorkflowStore) -> Route:
    """The paginated `GET /handlers`, to go ahead of the server's own."""

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
        query = HandlerQuery(
            status_in=_listed(params.getlist("status"), STATUSES),
            workflow_name_in=_listed(params.getlist("workflow_name")),
        )
        if isinstance(store, SqliteRunStore):
            body = await asyncio.to_thread(_sqlite_page, store, query, limit, before)
        elif isinstance(store, PostgresRunStore):
            rows = await given_up_after(
                POSTGRES_TIMEOUT,
                _postgres_rows(store, query, limit, before),
                "the postgresql run store",
            )
            body = (
                None
                if rows is None
                else await asyncio.to_thread(
                    lambda: _json(
                        store.unrecorded.over([store._row_to_handler(row) for row in rows]), limit
                    )
                )
            )
        else:
            found = await store.query(query)
            body = await asyncio.to_thread(_page_of, found, limit, before)
        if body is None:
            return JSONResponse(
                {"detail": f"No run {before!r} to list the runs before."}, status_code=404
            )
        return Response(body, media_type="application/json")

    return Route("/handlers", handlers, methods=["GET"])


def _listed(values: list[str], allowed: tuple[str, ...] | None = None) -> list[Any] | None:
    """A repeated query parameter as the server reads it: blanks dropped, None if none left,
    unknown statuses dropped (none known left: no run matches)."""
    kept = [v.strip() for v in values if v.strip()]
    if not kept:
        return None
    return [v for v in kept if v in allowed] if allowed else kept


def _json(handlers: list[PersistentHandler], limit: int) -> bytes:
    page = handlers[:limit]
    items = [handler_data_from_persistent(h).model_dump(mode="json") for h in page]
    more = len(handlers) > limit
    return json.dumps(
        {"handlers": items, "next_before": page[-1].handler_id if more else None}
    ).encode()


def _page_of(found: list[PersistentHandler], limit: int, before: str | None) -> bytes | None:
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
    return _json(ordered, limit)


def _sqlite_page(
    store: SqliteRunStore, query: HandlerQuery, limit: int, before: str | None
) -> bytes | None:
    spec = store._build_filters(query)  # the store's own SQL for the server's filters
    if spec is None:
        return _json([], limit)
    clauses, params = list(spec[0]), list(spec[1])
    connection = sqlite3.connect(store.db_path, timeout=30.0)  # a reader: WAL never blocks it
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
            f"SELECT {COLUMNS} FROM handlers{where} "  # clauses are the store's, values bound
            "ORDER BY COALESCE(started_at, '') DESC, handler_id DESC LIMIT ?",
            (*params, limit + 1),
        ).fetchall()
    finally:
        connection.close()
    return _json(
        store.unrecorded.over([store._row_to_persistent_handler(row) for row in rows]), limit
    )


async def _postgres_rows(
    store: PostgresRunStore, query: HandlerQuery, limit: int, before: str | None
) -> list[Any] | None:
    """The page's rows (one more than `limit`, to tell whether another page follows), or
    None when `before` names no run. Started times compare as timestamps; a run without one
    sorts last, as the empty string does on SQLite."""
    spec = store._build_filters(query)  # the store's own SQL ($1, $2...) for the server's filters
    if spec is None:
        return []
    clauses, params = list(spec[0]), list(spec[1])
    started = "COALESCE(started_at, '-infinity'::timestamptz)"
    pool = await store._ensure_pool()
    async with pool.acquire() as connection:
        if before is not None:
            row = await connection.fetchrow(
                f"SELECT {started} AS started, handler_id FROM {store._handlers_ref} WHERE handler_id = $1",
                before,
            )
            if row is None:
                return None
            n = len(params)
            clauses.append(f"({started}, handler_id) < (${n + 1}, ${n + 2})")
            params.extend((row["started"], row["handler_id"]))
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        return await connection.fetch(
            f"SELECT {COLUMNS} FROM {store._handlers_ref}{where} "  # clauses are the store's, values bound
            f"ORDER BY {started} DESC, handler_id DESC LIMIT ${len(params) + 1}",
            *params,
            limit + 1,
        )
