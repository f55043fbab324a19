"""Calling this server's own routes in-process, as a request from the caller would.

The OpenAI door starts its runs through `POST /workflows/crag/run-nowait` and reads them from
`GET /events/{handler_id}`, so a run started there passes everything a run request passes (the
API key, the question check, the store gate, admission control) and is recorded like any other,
its trace page included. httpx's ASGI transport would do, but it holds a response back until
the response ends, and an event stream must arrive as it is written: hence this small caller.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Scope

# The outer request's headers an inner one carries: its key (auth.py) and its Host (guard.py).
FORWARDED = frozenset({b"authorization", b"x-api-key", b"host"})


@dataclass
class InnerResponse:
    """A response's status and headers, and its body as it arrives."""

    status: int
    headers: dict[str, str]
    chunks: AsyncIterator[bytes]

    async def json(self) -> Any:
        return json.loads(b"".join([c async for c in self.chunks]) or b"null")

    async def lines(self) -> AsyncIterator[bytes]:
        """The body's lines (NDJSON), each as soon as it is whole."""
        pending = b""
        async for chunk in self.chunks:
            pending += chunk
            *whole, pending = pending.split(b"\n")
            for line in whole:
                if line.strip():
                    yield line
        if pending.strip():
            yield pending


async def call(
    app: ASGIApp, outer: Scope, method: str, path: str, *, query: str = "", body: Any = None
) -> InnerResponse:
    """`method path?query` with `body` as JSON, sent to `app` with `outer`'s key and Host.

    Returns once the response has started; its body is read from `chunks`, and leaving the
    body unread (closing the iterator) tells the route its caller went away.
    """
    payload = b"" if body is None else json.dumps(body).encode()
    headers = [(k, v) for k, v in outer.get("headers", []) if k in FORWARDED]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    scope: Scope = {
        **{k: outer[k] for k in ("http_version", "scheme", "server", "client", "root_path") if k in outer},
        "type": "http", "asgi": {"version": "3.0"}, "method": method, "path": path,
        "raw_path": path.encode(), "query_string": query.encode(), "headers": headers,
    }
    sent: asyncio.Queue[Message] = asyncio.Queue()
    gone = asyncio.Event()
    requested = [{"type": "http.request", "body": payload, "more_body": False}]

    async def receive() -> Message:
        if requested:
            return requested.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        await sent.put(message)

    task = asyncio.create_task(app(scope, receive, send))
    start = await _next(sent, task)
    if start is None:  # the app ended without answering: a bug, said as a 500
        gone.set()
        return InnerResponse(500, {}, _empty())
    response_headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in start.get("headers", [])}

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while (message := await _next(sent, task)) is not None:
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body"):
                    break
        finally:
            gone.set()
            if not task.done():
                task.cancel()

    return InnerResponse(start["status"], response_headers, chunks())


async def _next(sent: asyncio.Queue[Message], task: asyncio.Task[None]) -> Message | None:
    """The app's next message, or None once it has ended with nothing more sent."""
    getting = asyncio.ensure_future(sent.get())
    await asyncio.wait({getting, task}, return_when=asyncio.FIRST_COMPLETED)
    if getting.done():
        return getting.result()
    getting.cancel()
    if not sent.empty():
        return sent.get_nowait()
    task.result()  # raises the app's own error, if it failed
    return None


async def _empty() -> AsyncIterator[bytes]:
    return
    yield  # an async generator that yields nothing
