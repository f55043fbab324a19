"""The workflow server's own routes, behind crag's access check (crag.app.access).

llama-agents-server's routes (mounted under crag's app) read a run by its handler id, or a
workflow by its name, and know nothing of keys or collections. Every request that reaches
them passes here first:

    /results/{id}  /events/{id}  /handlers/{id}  /handlers/{id}/cancel
        the run must be one the caller may see (`RunService.stored`), else 404
    /workflows                    the workflows of the collections the caller may ask
    /workflows/{name}/...         a workflow of a collection the caller may ask, else 404

Anything else of the server's is a 404: a route the package adds in a later version is closed
until crag decides who may use it, so that no route is left open by being forgotten.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from crag.app.access import principal_of
from crag.app.runs import RunRefused

if TYPE_CHECKING:
    from crag.app.runs import RunService

RUN_PATH = re.compile(r"/(?:results|events|handlers)/([^/]+)(?:/cancel)?/?")
WORKFLOW_PATH = re.compile(r"/workflows/([^/]+)/(?:schema|representation|events)/?")
NO_RUN = {"detail": "No such run."}


class RunGate:
    """See the module docstring; `app` is the workflow server's, `runs` says what is served."""

    def __init__(self, app: ASGIApp, runs: RunService) -> None:
        self.app = app
        self.runs = runs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = await self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _refusal(self, scope: Scope) -> JSONResponse | None:
        principal = principal_of(scope)
        path: str = scope["path"]
        if run := RUN_PATH.fullmatch(path):
            if await self.runs.stored(run.group(1), principal) is None:
                return JSONResponse(NO_RUN, status_code=404)
            return None
        if path.rstrip("/") == "/workflows":
            names = [served.workflow_name for served in self.runs.visible(principal)]
            return JSONResponse({"workflows": names})
        if workflow := WORKFLOW_PATH.fullmatch(path):
            try:
                self.runs.served_by_workflow(workflow.group(1), principal)
            except RunRefused as refused:
                return JSONResponse({"detail": str(refused)}, status_code=refused.status)
            return None
        return JSONResponse({"detail": "Not Found"}, status_code=404)
