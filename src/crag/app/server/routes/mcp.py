"""`/mcp`: crag's MCP server (crag.app.mcp_server) over streamable HTTP, inside `crag serve`.

It sits behind the same middleware as every other route, so the API key (ops/auth.py) guards it,
and without a key the request guard's Host and Origin checks do (ops/guard.py): the SDK's own
DNS-rebinding check is left off, as it would refuse a server reached by its public name.
The tools run through the server's `RunService`, as every door does: `ask` is admitted,
recorded and listed like a run from any other door (its trace at `/handlers/{id}/trace`
too), and `search` waits for a run place. Each call is judged by the key of the HTTP request
it came in (the principal the door left in its scope; crag.app.mcp_server): its tools and
resources reach only that key's collections, and a request no door vouched for sees none. `ingest` is not offered here (writes go through
`crag ingest`, which the reload then picks up). Without the `mcp` package there is no `/mcp`:
`crag-workflows[mcp]` adds it.
"""

from __future__ import annotations

from importlib.util import find_spec

from starlette.routing import Route

from crag.app.mcp_engine import Engine

PATH = "/mcp"


def mcp_available() -> bool:
    return find_spec("mcp") is not None


def mcp_routes(engine: Engine) -> list[Route]:
    """The `/mcp` route; the app's lifespan must run `engine.sessions()` (the SDK's session
    manager must be running before a request reaches the route)."""
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
    from mcp.server.transport_security import TransportSecuritySettings

    from crag.app.mcp_server import build_mcp

    server = build_mcp(engine)
    off = TransportSecuritySettings(enable_dns_rebinding_protection=False)  # ops/guard.py does it
    server.streamable_http_app(streamable_http_path=PATH, transport_security=off)  # makes the manager
    engine.session_manager = server.session_manager
    return [Route(PATH, StreamableHTTPASGIApp(server.session_manager))]
