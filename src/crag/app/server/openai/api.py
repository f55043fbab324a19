"""The OpenAI-compatible door: any OpenAI client asks crag as the model "crag".

    POST /v1/chat/completions   whole, or streamed as `chat.completion.chunk` server-sent events
    POST /v1/completions        the legacy door: the prompt as the one question (legacy.py)
    GET  /v1/models             lists the one model, "crag"
    GET  /v1/models/crag        the model itself (another id: OpenAI's 404 `model_not_found`)

    client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key=CRAG_API_KEY or "none")
    reply = client.chat.completions.create(model="crag", messages=[{"role": "user", "content": "…"}])

The last user message is the question; the turns before it make a follow-up standalone
(`QueryCondenser`, recorded in the run's trace). The content is the cited answer, `[n]`
markers and all, followed by its sources; the `crag` field adds the verdict, the sources and
the link to the run's trace. Each run starts through the server's `RunService` (crag.app.runs),
so admission control, the store's check and the question check apply as to any run, and it
is recorded with the others (`/handlers`, the live page); the API key is the app's.
Every error under `/v1/`, an unknown path or method included, is in OpenAI's shape
(errors.py); what crag cannot give (tools, JSON output, several choices) is a 400 naming
the parameter (request.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from crag.app.access import Principal, principal_of
from crag.app.runs import Run, RunRefused, RunService
from crag.app.server.openai.errors import openai_error, unmatched
from crag.app.server.openai.legacy import legacy_door
from crag.app.server.openai.request import MODEL_ID, BadRequest, ChatRequest, parse
from crag.errors import redact
from crag.events import AnswerDeltaEvent, CragResult

RESTARTED = "\n\n(The model failed mid-answer; the extractive answer follows.)\n\n"


def openai_routes(runs: RunService) -> list[Route]:
    """The `/v1/` routes, each run started by `runs`, then `unmatched` for the rest."""
    created = int(time.time())

    def described(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": created, "owned_by": "crag"}

    async def models(request: Request) -> JSONResponse:
        """The models the caller's key may ask: one per collection ("crag", "crag:hr")."""
        visible = runs.visible(principal_of(request.scope))
        return JSONResponse({"object": "list", "data": [described(s.workflow_name) for s in visible]})

    async def one_model(request: Request) -> JSONResponse:
        asked = request.path_params["model"]
        try:
            runs.served_by_workflow(asked, principal_of(request.scope))
        except RunRefused:
            return openai_error(404, _no_model(asked), param="model", code="model_not_found")
        return JSONResponse(described(asked))

    async def completions(request: Request) -> Response:
        try:
            chat = parse(await request.body())
            run = await _start(runs, chat, principal_of(request.scope))
        except BadRequest as exc:
            return openai_error(exc.status, exc.message, param=exc.param, code=exc.code, headers=exc.headers)
        reply = _Reply(run, str(request.base_url).rstrip("/"), chat.model)
        if chat.stream:
            return StreamingResponse(reply.stream(chat.include_usage), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        try:
            result = await reply.result()
        except BadRequest as exc:
            return openai_error(exc.status, exc.message, code=exc.code)
        return JSONResponse(reply.whole(result))

    routes = [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", one_model, methods=["GET"]),  # ids may hold "/"
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/v1/completions", legacy_door(completions), methods=["POST"]),
    ]
    return [*routes, unmatched(routes)]


def _no_model(asked: str) -> str:
    return (f"The model '{asked}' does not exist; this server answers as \"crag\" or \"crag:NAME\" "
            "for a collection your key may ask (GET /v1/models lists them).")


async def _start(runs: RunService, chat: ChatRequest, principal: Principal) -> Run:
    """Start the run on the collection `chat.model` names; `BadRequest` saying why it was
    refused (404 for a model the key may not ask, a 400 question, a 503 with the seconds to wait)."""
    start = {"query": chat.question, "history": [t.model_dump() for t in chat.history]}
    try:
        served = runs.served_by_workflow(chat.model, principal)
    except RunRefused:
        raise BadRequest(_no_model(chat.model), param="model", status=404, code="model_not_found") from None
    try:
        return await runs.start(start, collection=served.collection, principal=principal)
    except RunRefused as refused:
        if refused.status == 503:  # busy, or the store cannot record runs: come back later
            retry = {"Retry-After": str(refused.retry_after or 5)}
            raise BadRequest(str(refused), status=503, code="server_busy", headers=retry) from None
        raise BadRequest(str(refused), param="messages" if refused.status == 400 else None,
                         status=refused.status) from None


class _Reply:
    """One run's events as an OpenAI reply, whole or chunk by chunk."""

    def __init__(self, run: Run, base_url: str, model: str = MODEL_ID) -> None:
        self.run = run
        self.model = model
        self.id = f"chatcmpl-{run.handler_id}"
        self.handler_id = run.handler_id
        self.trace_url = f"{base_url}/handlers/{run.handler_id}/trace"
        self.created = int(time.time())

    async def events(self) -> AsyncIterator[AnswerDeltaEvent | CragResult]:
        """The run's answer deltas, then its result; `BadRequest` (502) if it did not finish."""
        async for event in self.run.events():
            if isinstance(event, AnswerDeltaEvent):
                yield event
        yield await self.result()

    async def result(self) -> CragResult:
        try:
            return await self.run.result()
        except Exception as exc:  # noqa: BLE001 - failed, cancelled or timed out: said, not raised
            reason = redact(str(exc)) or type(exc).__name__
            raise BadRequest(f"The run did not finish: {reason}", status=502, code="run_failed") from None

    def whole(self, result: CragResult) -> dict[str, Any]:
        message = {"role": "assistant", "content": result.answer + sources_text(result)}
        return {
            **self._head("chat.completion"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
            "usage": usage(result),
            "crag": self.extra(result),
        }

    async def stream(self, include_usage: bool) -> AsyncIterator[str]:
        """`data: {chunk}` lines: the role, each delta, the sources, the end (with `crag`),
        the usage if asked for, then `data: [DONE]`."""
        yield self._chunk({"role": "assistant", "content": ""}, include_usage)
        ended = False
        try:
            async for item in self.events():
                if isinstance(item, AnswerDeltaEvent):
                    text = (RESTARTED if item.restart else "") + item.delta
                    if text:
                        yield self._chunk({"content": text}, include_usage)
                    continue
                yield self._chunk({"content": sources_text(item)}, include_usage)
                yield self._chunk({}, include_usage, finish="stop", crag=self.extra(item))
                if include_usage:
                    yield _sse({**self._head("chat.completion.chunk"), "choices": [], "usage": usage(item)})
            ended = True
        except BadRequest as exc:  # the response has begun: the error is the stream's last event
            ended = True
            yield _sse({"error": {"message": exc.message, "type": "server_error", "param": None, "code": exc.code}})
        finally:
            if not ended:  # the client went away mid-answer: nobody will read the rest
                self.run.cancel_soon()
        yield "data: [DONE]\n\n"

    def extra(self, result: CragResult) -> dict[str, Any]:
        """What crag adds to OpenAI's reply: why this answer, from where, and the run's trace."""
        return {
            "verdict": result.verdict.value,
            "sources": [s.model_dump(mode="json", exclude_none=True) for s in result.sources],
            "handler_id": self.handler_id,
            "trace_url": self.trace_url,
            "question": result.query,
            "asked": result.trace.asked,
            "degraded": result.degraded,
            # the whole cost record: `estimated` says whether `usage` holds counts made here
            # (a server that reported none) beside the server's own
            "cost": result.cost.model_dump(mode="json"),
        }

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def _chunk(self, delta: dict[str, str], include_usage: bool, finish: str | None = None, **more: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        chunk = {**self._head("chat.completion.chunk"), "choices": [choice], **more}
        if include_usage:
            chunk["usage"] = None  # as OpenAI: null on every chunk but the last
        return _sse(chunk)


def _sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def sources_text(result: CragResult) -> str:
    """The sources as the answer's last lines: `[1] Helio H10 manual (handbook.pdf, p. 3)`."""
    if not result.sources:
        return ""
    lines = []
    for s in result.sources:
        name = s.title or s.url or s.id
        where = s.url if s.url and s.url != name else s.citation()
        lines.append(f"[{s.number}] {name}" + (f" ({where})" if where else ""))
    return "\n\nSources:\n" + "\n".join(lines)


def usage(result: CragResult) -> dict[str, int]:
    """The run's model tokens (0 offline: no model was asked); where the server reported none,
    counted here, which the `crag` field's `cost.estimated` says."""
    tokens_in, tokens_out = result.cost.tokens_in, result.cost.tokens_out
    return {"prompt_tokens": tokens_in, "completion_tokens": tokens_out, "total_tokens": tokens_in + tokens_out}
