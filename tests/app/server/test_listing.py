"""`GET /handlers` a page at a time: newest first, `limit` and `before`, the server's filters,
the same pages from SQLite (SQL in a worker thread) and PostgreSQL (keyset SQL on the store's
pool) as from any other store."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from llama_agents.server import (
    AbstractWorkflowStore,
    HandlerQuery,
    MemoryWorkflowStore,
)
from support.stores import filled, handlers_client

from crag.app.server.store import PostgresRunStore, SqliteRunStore
from crag.app.server.store.listing import DEFAULT_LIMIT

POSTGRES_URL = os.environ.get("CRAG_TEST_POSTGRES_URL")


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AbstractWorkflowStore]:
    if request.param == "sqlite":
        yield SqliteRunStore(str(tmp_path / "server.db"))
    elif request.param == "memory":
        yield MemoryWorkflowStore()
    else:
        if not POSTGRES_URL:
            pytest.skip("CRAG_TEST_POSTGRES_URL is not set")
        store = PostgresRunStore(POSTGRES_URL)
        every_run = HandlerQuery(status_in=["running", "completed", "failed", "cancelled"])
        await store.delete(every_run)  # the pages count every run in the database
        yield store
        await store.delete(every_run)
        await store.close()


async def test_pages_walk_every_run_once_newest_first(store: AbstractWorkflowStore) -> None:
    ids = await filled(store, 250)
    seen: list[str] = []
    async with handlers_client(store) as client:
        first = (await client.get("/handlers")).json()
        assert len(first["handlers"]) == DEFAULT_LIMIT
        url = "/handlers?limit=40"
        while True:
            page = (await client.get(url)).json()
            assert len(page["handlers"]) <= 40
            seen += [h["handler_id"] for h in page["handlers"]]
            if page["next_before"] is None:
                break
            url = f"/handlers?limit=40&before={page['next_before']}"
    assert [h["handler_id"] for h in first["handlers"]] == ids[:DEFAULT_LIMIT]
    assert seen == ids


async def test_a_page_keeps_the_servers_filters(store: AbstractWorkflowStore) -> None:
    ids = await filled(store, 30)
    failed = [i for i in ids if int(i[1:]) % 3 == 0]
    async with handlers_client(store) as client:
        page = (await client.get("/handlers", params={"limit": 4, "status": "failed"})).json()
        after = (
            await client.get(
                "/handlers", params={"limit": 4, "status": "failed", "before": page["next_before"]}
            )
        ).json()
        none = (await client.get("/handlers", params={"workflow_name": "other"})).json()
        unknown_status = (await client.get("/handlers", params={"status": "sleeping"})).json()
    assert [h["handler_id"] for h in page["handlers"] + after["handlers"]] == failed[:8]
    assert {h["status"] for h in page["handlers"]} == {"failed"}
    assert none == unknown_status == {"handlers": [], "next_before": None}


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=ten"])
async def test_a_limit_out_of_range_is_a_400(store: AbstractWorkflowStore, query: str) -> None:
    async with handlers_client(store) as client:
        reply = await client.get(f"/handlers?{query}")
    assert reply.status_code == 400
    assert "limit" in reply.json()["detail"]


async def test_before_an_unknown_run_is_a_404(store: AbstractWorkflowStore) -> None:
    await filled(store, 3)
    async with handlers_client(store) as client:
        reply = await client.get("/handlers?before=no-such-run")
    assert reply.status_code == 404


def test_the_live_page_asks_for_a_small_page_of_recent_runs() -> None:
    from crag.app.render import live

    source = Path(live.__file__).read_text(encoding="utf-8")
    assert 'api("/handlers?limit=15")' in source
    assert 'api("/handlers")' not in source
