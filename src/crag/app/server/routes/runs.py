"""`POST /workflows/{name}/run` and `/run-nowait`, in the workflow server's request and reply
shapes (so llama-agents-client and the live page work unchanged), started by `RunService`.
`name` is "crag" for the default collection, "crag:hr" for the collection "hr"; one the
caller's key may not ask is a 404, as one that does not exist.

    {"start_event": {"query": "…", "history": [...]}, "handler_id": "optional"}

The start event may also come as an envelope (`{"type": …, "value": {…}}`), as a JSON string,
or under `kwargs`, as the server's own routes take it. A refusal is `{"detail": "…"}` with
its status (400, 409, 503 with `Retry-After`).
"""

from __future__ import annotations

from typing import Any

from llama_agents.client.protocol.serializable_events import EventEnvelope, EventValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from crag._compat.llama_agents import handler_data_from_persistent
from crag.app.access import principal_of
from crag.app.runs import Run, RunRefused, RunService, Served


def run_routes(service: RunService) -> list[Route]:
    """The two run routes of every served collection's workflow."""

    async def started(request: Request) -> Run | JSONResponse:
        principal = principal_of(request.scope)
        try:
            served = service.served_by_workflow(request.path_params["name"], principal)
            start, handler_id = await _run_request(request, served)
            return await service.start(start, handler_id=handler_id, collection=served.collection,
                                       principal=principal)
        except RunRefused as refused:
            return refusal(refused)

    async def run_nowait(request: Request) -> JSONResponse:
        run = await started(request)
        return run if isinstance(run, JSONResponse) else JSONResponse(run.record.model_dump())

    async def run_and_wait(request: Request) -> JSONResponse:
        run = await started(request)
        if isinstance(run, JSONResponse):
            return run
        try:
            await run.result()
        except Exception:  # noqa: BLE001, S110 - failed, cancelled or timed out: the record says which
            pass
        stored = await service.stored(run.handler_id, principal_of(request.scope))
        data = handler_data_from_persistent(stored) if stored is not None else run.record
        return JSONResponse(data.model_dump(), status_code=200 if data.status == "completed" else 500)

    return [
        Route("/workflows/{name}/run", run_and_wait, methods=["POST"]),
        Route("/workflows/{name}/run-nowait", run_nowait, methods=["POST"]),
    ]


def refusal(refused: RunRefused) -> JSONResponse:
    headers = {"Retry-After": str(refused.retry_after)} if refused.retry_after is not None else None
    return JSONResponse({"detail": str(refused)}, status_code=refused.status, headers=headers)


async def _run_request(request: Request, served: Served) -> tuple[Any, str | None]:
    """The start event and handler id a run request names; `RunRefused` (400) if unreadable."""
    try:
        body = await request.json()
    except RecursionError:
        raise RunRefused("The request body is JSON nested too deeply to read; a run request is a "
                         "flat object.", status=400) from None
    except ValueError as exc:
        raise RunRefused(f"The request body is not JSON: {exc}.", status=400) from None
    if not isinstance(body, dict):
        raise RunRefused("A run request is a JSON object with a `start_event`.", status=400)
    if body.get("context"):
        raise RunRefused("A run cannot start from a given context: each crag run starts afresh.",
                         status=400)
    handler_id = body.get("handler_id")
    if handler_id is not None and (not isinstance(handler_id, str) or not handler_id.strip()):
        raise RunRefused("`handler_id` must be a non-empty string.", status=400)
    start = body.get("start_event", body.get("kwargs"))
    if start is None:
        raise RunRefused("The run request names no question: send {\"start_event\": {\"query\": …}}.",
                         status=400)
    start_class = served.workflow.start_event_class
    try:
        event = EventEnvelope.parse(start, {start_class.__name__: start_class}, explicit_event=start_class)
    except (EventValidationError, ValueError, TypeError, RecursionError):
        # Not an envelope: the start event's own fields, which the service checks.
        if isinstance(start, dict):
            return start, handler_id
        raise RunRefused("`start_event` must be an object with the question as `query`.", status=400) from None
    return event, handler_id
