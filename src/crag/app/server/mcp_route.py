"""`/mcp`: crag's MCP server (crag.app.mcp_server) over streamable HTTP, inside `crag serve`.

It sits behind the same middleware as every other route, so the API key (auth.py) guards it,
and without a key the request guard's Host and Origin checks do (guard.py): the SDK's own
DNS-rebinding check is left off, as it would refuse a server reached by its public name.
The tools run on the server's current workflow, swapped when the index is reloaded, and each
call waits for a place under the server's admission control as a run request does (a full
queue is a tool error saying so); their runs are not kept in the run store. `ingest`
is not offered here (writes go through `crag ingest`, which the reload then picks up).
Without the `mcp` package there is no `/mcp`: `crag-workflows[mcp]` adds it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.util import find_spec
from typing import Any

from starlette.routing import Route

from crag.app.mcp_engine import Engine
from crag.app.server.admission import Admission
from crag.app.server.upkeep import around_lifespan
from crag.errors import CragError

PATH = "/mcp"


def mcp_available() -> bool:
    return find_spec("mcp") is not None


class BusyError(CragError):
    """Every run place and queue place is taken."""


def admitted(admission: Admission) -> Callable[[], AbstractAsyncContextManager[None]]:
    """A place under `admission` for the length of one tool call, or `BusyError`."""

    @asynccontextmanager
    async def place() -> AsyncIterator[None]:
        slot = await admission.acquire()
        if slot is None:
            raise BusyError(
                f"The server is busy ({admission.max_runs} runs in flight, "
                f"{admission.max_queue} waiting); ask again in {admission.retry_after()} s."
            )
        try:
            yield
        finally:
            slot.release()

    return place


def mcp_routes(app: Any, engine: Engine) -> list[Route]:
    """The `/mcp` route for `app` (a Starlette app), whose lifespan then also runs the SDK's
    session manager (it must be running before a request reaches the route)."""
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
    from mcp.server.transport_security import TransportSecuritySettings

    from crag.app.mcp_server import build_mcp

    server = build_mcp(engine)
    off = TransportSecuritySettings(enable_dns_rebinding_protection=False)  # guard.py does it
    server.streamable_http_app(
        streamable_http_path=PATH, transport_security=off
    )  # makes the manager
    manager = server.session_manager
    around_lifespan(app, manager.run)
    return [Route(PATH, StreamableHTTPASGIApp(manager))]
