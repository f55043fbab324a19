"""A run request is refused at once, with the reason, while the run store cannot record runs.

Without this, a request to run while PostgreSQL was down got a 500 quoting asyncpg (and the
database's address); while it was frozen, the request hung for as long as the freeze; on a
full disk every run was a 500 while /health said 200. The request now gets the answer
/health gives (one shared probe, upkeep.py): a 503 naming the store's problem, within the
probe's time limit, before any run starts or any admission slot is taken.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from crag.app.server.admission import RUN_PATH
from crag.app.server.upkeep import PROBE_REUSE, Upkeep

RETRY_AFTER = 5  # seconds: a store outage outlasts a busy moment


class StoreGate:
    """Run requests pass only while the store's probe passes; anything else passes."""

    def __init__(self, app: ASGIApp, upkeep: Upkeep) -> None:
        self.app = app
        self.upkeep = upkeep

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and RUN_PATH.match(scope["path"]):
            problem = await self.upkeep.store_problem(reuse=PROBE_REUSE)
            if problem is not None:
                response = JSONResponse(
                    {
                        "detail": f"No run was started: {problem}. GET /health says when it can "
                        "record runs again.",
                        "store": self.upkeep.kind,
                    },
                    status_code=503,
                    headers={"Retry-After": str(RETRY_AFTER)},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
