"""What crag's users need beside the workflow server's own routes: a health check that
says what is served, a finished run's trace as a picture and its explanation, and the live page."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from llama_agents.server import HandlerQuery
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from crag._bounded import store_errors
from crag.app.access import principal_of
from crag.app.render import trace_html
from crag.app.render.explain import explanation_html, file_page_link
from crag.app.render.live import live_html
from crag.app.server.routes.files import files_route
from crag.app.server.store.listing import handlers_route
from crag.events import CragResult
from crag.index import ChunkIndex
from crag.index.collections import DEFAULT

if TYPE_CHECKING:
    from crag.app.runs import RunService
    from crag.app.server.ops.reload import IndexReloader
    from crag.app.server.ops.upkeep import Upkeep

def crag_routes(runs: RunService, store_kind: str, *, auth: bool, upkeep: Upkeep | None = None,
                indexes: dict[str, IndexReloader] | None = None) -> list[Route]:
    """`GET /health`, `GET /` (the live page), `GET /handlers/{handler_id}/trace`,
    `GET /handlers/{handler_id}/explanation` (the why of a finished run, an HTML fragment) and
    `GET /handlers` a page at a time (store/listing.py), and `GET /files/{file_id}`, a document the
    index lists, for citations to open (files.py, beside this). Each reads what `runs` serves now,
    of the collections the caller may see (`indexes`: each collection's health, by name)."""
    live = live_html(runs.workflow)  # the same for every request (a reload keeps the graph): drawn once
    store = runs.store
    indexes = indexes or {}

    async def health(request: Request) -> JSONResponse:
        """Open to all (load balancers): whether the server can answer, and what is served to
        the caller's key: a caller with no key (or one of another collection) learns nothing of
        a collection it may not ask, not even its name or size."""
        visible = runs.visible(principal_of(request.scope))
        # The default collection, or the only one: among several others none is "the index".
        single = runs.default if DEFAULT in runs.collections or len(runs.collections) == 1 else None
        body: dict[str, Any] = {
            "status": "healthy",
            "workflows": [served.workflow_name for served in visible],
            "index": _index_size(single.index) if single in visible else None,
            "store": store_kind,
            "auth": auth,
        }
        if len(runs.collections) > 1:
            body["collections"] = {served.collection: _index_size(served.index) for served in visible}
        watched = [indexes[served.collection] for served in visible if served.collection in indexes]
        if upkeep is not None:  # each probe off the event loop, within 2 s
            found = await asyncio.gather(upkeep.store_problem(), *(index.problem_now() for index in watched))
            problems = [p for p in found if p]
            hidden = any(await asyncio.gather(*(index.problem_now() for name, index in indexes.items()
                                                if index not in watched)))
        else:
            hidden = False
            try:
                await store.query(HandlerQuery(handler_id_in=["-health-probe-"]))
                problems = []
            except store_errors() as exc:  # any of them makes this process unfit
                problems = [f"the {store_kind} store is unreachable: {type(exc).__name__}"]
        if hidden:  # a collection the caller may not see cannot serve: said, without naming it
            problems.append("a collection this key cannot see cannot serve")
        if problems:
            body.update(status="unhealthy", error="; ".join(problems))
            return JSONResponse(body, status_code=503)
        return JSONResponse(body)

    async def live_page(request: Request) -> HTMLResponse:
        """Ask, watch the graph light up as the run's events arrive, then read why."""
        return HTMLResponse(live)

    async def finished(request: Request) -> CragResult | JSONResponse:
        """The finished run's result, or the JSON error to answer instead (404, 409)."""
        handler_id = request.path_params["handler_id"]
        handler = await runs.stored(handler_id, principal_of(request.scope))
        if handler is None:
            return JSONResponse({"detail": f"No run {handler_id!r}."}, status_code=404)
        if handler.status == "running":
            return JSONResponse({"detail": "The run has not finished; its trace is drawn when it has."},
                                status_code=409)
        value = handler.result.result if handler.result is not None else None
        if value is None:
            return JSONResponse(
                {"detail": f"The run {handler.status} without a result: {handler.error or 'no error recorded'}."},
                status_code=409,
            )
        return value if isinstance(value, CragResult) else CragResult.model_validate(value)

    async def trace_page(request: Request) -> Response:
        """The run's path on the workflow's graph, and why, as `crag draw --trace` draws it."""
        result = await finished(request)
        if isinstance(result, JSONResponse):
            return result
        title = f"crag run {request.path_params['handler_id']}"
        return HTMLResponse(trace_html(runs.workflow, result.trace, title=title, link=file_page_link))

    async def explanation(request: Request) -> Response:
        """The why of a finished run, for the live page: an HTML fragment."""
        result = await finished(request)
        if isinstance(result, JSONResponse):
            return result
        if result.trace.explanation is None:
            return JSONResponse({"detail": "This run recorded no explanation."}, status_code=404)
        return HTMLResponse(explanation_html(result.trace.explanation, result.cost, link=file_page_link))

    return [
        Route("/health", health, methods=["GET"]),
        Route("/", live_page, methods=["GET"]),
        Route("/handlers/{handler_id}/trace", trace_page, methods=["GET"]),
        Route("/handlers/{handler_id}/explanation", explanation, methods=["GET"]),
        handlers_route(store, runs),
        files_route(lambda request: [served.index for served in runs.visible(principal_of(request.scope))]),
    ]


def _index_size(index: ChunkIndex | None) -> dict[str, int] | None:
    return {"chunks": len(index), "files": len(index.manifest)} if index is not None else None
