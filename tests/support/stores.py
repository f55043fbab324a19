"""Run stores filled with handlers, and `GET /handlers` served from one."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
from llama_agents.server import AbstractWorkflowStore, PersistentHandler
from starlette.applications import Starlette

from crag.app.server.store.listing import handlers_route

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


async def filled(store: AbstractWorkflowStore, n: int) -> list[str]:
    """`n` runs, one a second, every third failed; their ids newest first."""
    for i in range(n):
        await store.update(
            PersistentHandler(
                handler_id=f"h{i:04d}",
                workflow_name="crag",
                run_id=f"r{i}",
                status="failed" if i % 3 == 0 else "completed",
                started_at=START + timedelta(seconds=i),
            )
        )
    return [f"h{i:04d}" for i in reversed(range(n))]


def handlers_client(store: AbstractWorkflowStore) -> httpx.AsyncClient:
    """A client of `GET /handlers` on `store` alone, in process (no server)."""
    app = Starlette(routes=[handlers_route(store)])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://crag")
