"""Reject an unusable question before a run starts, as Starlette (ASGI) middleware.

The workflow itself raises QueryError for an empty or overlong question, but by then the
server has started a run and answered 200: the caller learns it only from a failed handler.
Checked here, the same rule gives a 400 naming the problem and starts nothing.
"""

from __future__ import annotations

import json
import re

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crag.workflows.base import MAX_QUERY_CHARS

RUN_PATH = re.compile(r"^/workflows/[^/]+/run(?:-nowait)?$")


def query_problem(body: bytes) -> str | None:
    """What is wrong with the question in a run request's JSON body, or None.

    Bodies that are not JSON objects, or carry no `query`, are left to the server, which
    already answers those with a 400 of its own.
    """
    try:
        return _problem(body)
    except RecursionError:  # the server's own parse would fail the same way, as a 500
        return "The request body is JSON nested too deeply to read; a run request is a flat object."


def _problem(body: bytes) -> str | None:
    try:
        payload = json.loads(body or b"{}")
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    start = payload.get("start_event", payload.get("kwargs"))
    if isinstance(start, str):  # the server also takes the event as a JSON string
        try:
            start = json.loads(start)
        except ValueError:
            return None
    if not _is_text(payload) or not _is_text(start):
        return ("The request holds a lone surrogate (a \\ud800-\\udfff escape with no pair), "
                "which is not text; send valid Unicode.")
    if isinstance(start, dict) and isinstance(start.get("value"), dict):
        start = start["value"]  # an envelope, as llama-agents-client sends it
    if not isinstance(start, dict) or "query" not in start:
        return None
    query = start["query"]
    if not isinstance(query, str):
        return f"The question must be a string, not {type(query).__name__}."
    words = " ".join(query.split())
    if not words:
        return "The question is empty; ask something."
    if len(words) > MAX_QUERY_CHARS:
        return f"The question is {len(words)} characters long; the limit is {MAX_QUERY_CHARS}."
    return None


def _is_text(value: object) -> bool:
    """Whether every string in `value` is valid Unicode (a "\\ud800" escape decodes to a lone
    surrogate, which no step could encode)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class QueryCheckMiddleware:
    """Answers 400 to a run request whose question is empty, overlong or not text."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not RUN_PATH.match(scope["path"]):
            await self.app(scope, receive, send)
            return
        body, messages = b"", []
        while True:
            message = await receive()
            messages.append(message)
            body += message.get("body", b"")
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        problem = query_problem(body)
        if problem:
            await JSONResponse({"detail": problem}, status_code=400)(scope, receive, send)
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)
