"""Loopback HTTP servers that speak the real OpenAI and Tavily APIs, for tests.

Standard library only: a `ThreadingHTTPServer` on 127.0.0.1 (a free port) in a
background thread. It records every request and answers with a function the test
supplies, so crag's real clients (openai/httpx, tavily/requests) are exercised end to
end without the network.

    with LoopbackServer(openai_chat(lambda messages: "9")) as server:
        settings = Settings.load(env={"OPENAI_BASE_URL": server.url + "/v1", ...})
        ...
        assert server.requests[0].path == "/v1/chat/completions"
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import socket
import struct
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any


@dataclass
class Request:
    """One request the server received, as the client sent it."""

    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    raw: bytes
    json: Any  # the parsed body, or None when it is not JSON
    started: float = 0.0  # time.perf_counter() when the handler began
    finished: float = 0.0  # ... and when it returned


@dataclass
class Reply:
    """What the server answers: a status and a JSON (or text) body."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Drop:
    """Close the connection without answering; `reset=True` sends a TCP RST instead of a FIN."""

    reset: bool = False


@dataclass
class Truncated:
    """Send `reply`'s status and headers, with the Content-Length of its whole body, but only
    the body's first `keep` bytes; then hang up."""

    reply: Reply
    keep: int = 20


@dataclass
class Stall:
    """Wait `seconds` (cut short when the server shuts down), then answer with `then`
    (default: hang up, as a server that never answers would when it is stopped)."""

    seconds: float
    then: Reply | Drop | Truncated | None = None


Answer = Reply | Drop | Truncated | Stall
Handler = Callable[[Request], Answer]


class LoopbackServer:
    """A local HTTP server answering every request with `handler(request)`.

    Use as a context manager; `url` is "http://127.0.0.1:PORT" (no trailing slash).
    A handler that raises is answered with HTTP 500 and the traceback, and the
    exception is kept in `errors` so a test can tell a server bug from a client one.
    """

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the server is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def requests_to(self, path_suffix: str) -> list[Request]:
        """Recorded requests whose path ends with `path_suffix`, in arrival order."""
        return [r for r in self.requests if r.path.endswith(path_suffix)]

    def __enter__(self) -> LoopbackServer:
        owner = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in one segment (flushed after each request), without
            # Nagle's wait for the client's delayed ACK: 40 ms per request otherwise.
            wbufsize = 1 << 16
            disable_nagle_algorithm = True

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                request = Request(
                    method=self.command,
                    path=self.path.split("?", 1)[0],
                    headers={k.lower(): v for k, v in self.headers.items()},
                    raw=raw,
                    json=body,
                    started=time.perf_counter(),
                )
                with owner._lock:
                    owner.requests.append(request)
                try:
                    reply = owner.handler(request)
                except Exception as exc:  # noqa: BLE001 - reported to the client and the test
                    owner.errors.append(exc)
                    reply = Reply(500, {"error": {"message": traceback.format_exc()}})
                try:
                    self._answer(reply)
                except OSError:  # the client hung up first (it timed out): nothing to tell it
                    self.close_connection = True
                request.finished = time.perf_counter()

            def _answer(self, reply: Answer | None) -> None:
                if isinstance(reply, Stall):
                    if owner._closing.wait(reply.seconds):
                        reply = Drop()
                    else:
                        reply = reply.then
                if reply is None or isinstance(reply, Drop):
                    if reply is not None and reply.reset:
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                elif isinstance(reply, Truncated):
                    self._send(reply.reply, keep=reply.keep)
                    self.close_connection = True
                else:
                    self._send(reply)

            def _send(self, reply: Reply, keep: int | None = None) -> None:
                if isinstance(reply.body, (bytes, str)):
                    data = reply.body.encode() if isinstance(reply.body, str) else reply.body
                    content_type = "text/plain; charset=utf-8"
                else:
                    data = json.dumps(reply.body).encode()
                    content_type = "application/json"
                self.send_response(reply.status)
                if "content-type" not in {name.lower() for name in reply.headers}:
                    self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data if keep is None else data[:keep])
                self.wfile.flush()

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

        self._closing.clear()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        # A short poll interval: shutdown() waits for the serving loop to notice (default 0.5 s).
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="loopback",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._server is not None and self._thread is not None
        self._closing.set()  # wakes stalled handlers, which then hang up
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default backlog (5) drops connections under load

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up mid-answer is expected here; handler bugs go to `errors`


def flaky(faults: list[Answer], then: Handler, *, when: Callable[[Request], bool] | None = None) -> Handler:
    """Answers the first `len(faults)` requests with `faults`, in order, and the rest with `then`.

    `when(request)`: only requests it accepts get the faults (say, only grading calls).
    """
    lock = threading.Lock()
    pending = list(faults)

    def handle(request: Request) -> Answer:
        with lock:
            fault = pending.pop(0) if pending and (when is None or when(request)) else None
        return fault if fault is not None else then(request)

    return handle


def chaos(handler: Handler, *, rate: float, faults: list[Answer], seed: int = 0) -> Handler:
    """Answers a fraction `rate` of requests with one of `faults`, picked at random, the rest
    with `handler`.

    The draw is seeded by `seed`, the request's body and how many times that body has been
    seen (its attempt number), not by arrival order, so a concurrent run is repeatable and a
    retried request gets a fresh draw.
    """
    lock = threading.Lock()
    seen: dict[bytes, int] = {}

    def handle(request: Request) -> Answer:
        digest = hashlib.sha256(request.path.encode() + b"\0" + request.raw).digest()
        with lock:
            seen[digest] = attempt = seen.get(digest, 0) + 1
        rng = random.Random(f"{seed}:{digest.hex()}:{attempt}")
        if rng.random() < rate:
            return rng.choice(faults)
        return handler(request)

    return handle


# --- OpenAI chat completions -------------------------------------------------------------

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
_ids = count(1)


def chat_completion(content: str, *, model: str, prompt_text: str = "", finish_reason: str = "stop") -> dict[str, Any]:
    """A non-streaming `chat.completion` object as OpenAI returns it."""
    prompt_tokens = max(1, len(prompt_text.split()))
    completion_tokens = max(1, len(content.split()))
    return {
        "id": f"chatcmpl-loopback-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_loopback",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def message_text(request: Request) -> str:
    """All message contents of a chat-completions request, joined by newlines."""
    parts: list[str] = []
    for message in (request.json or {}).get("messages", []):
        content = message.get("content")
        if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
        elif content:
            parts.append(str(content))
    return "\n".join(parts)


def _openai_error(status: int, message: str) -> Reply:
    return Reply(status, {"error": {"message": message, "type": "invalid_request_error"}})


def openai_chat(
    reply: Callable[[str], str | Answer], *, delay: Callable[[str], float] | None = None
) -> Handler:
    """Answers `POST /v1/chat/completions` with `reply(prompt)`, the request's message text.

    `reply` returns the assistant's content, or a `Reply` to send as is (an error status)
    or a fault (`Drop`, `Truncated`, `Stall`).
    `delay(prompt)` seconds are slept before answering, to make calls overlap in time.
    A streaming request (`"stream": true`, as crag's synthesizer sends) gets the content as
    `chat.completion.chunk` server-sent events, a word a chunk (`stream_chunks`).
    """

    def handle(request: Request) -> Reply:
        if request.method != "POST" or request.path not in CHAT_PATHS:
            return _openai_error(404, f"no route {request.method} {request.path}")
        body = request.json or {}
        prompt = message_text(request)
        if delay is not None:
            time.sleep(delay(prompt))
        content = reply(prompt)
        if not isinstance(content, str):
            return content
        model = body.get("model", "unknown")
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return stream_chunks(content, model=model, prompt_text=prompt, usage=usage)
        return Reply(200, chat_completion(content, model=model, prompt_text=prompt))

    return handle


def stream_chunks(
    content: str, *, model: str, prompt_text: str = "", usage: bool = True, finish_reason: str = "stop"
) -> Reply:
    """`content` as OpenAI streams it: a role chunk, a chunk per word (with the space before
    it), a finish chunk and, when asked (`stream_options.include_usage`), a usage chunk, then
    `data: [DONE]`; sent in one body."""
    whole = chat_completion(content, model=model, prompt_text=prompt_text)
    head = {k: whole[k] for k in ("id", "created", "model", "system_fingerprint")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    pieces = re.findall(r"\s*\S+", content) or [content]
    events = [chunk({"role": "assistant", "content": ""}), *(chunk({"content": p}) for p in pieces),
              chunk({}, finish_reason), *([{**head, "choices": [], "usage": whole["usage"]}] if usage else [])]
    text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    return Reply(200, text, headers={"Content-Type": "text/event-stream"})


# --- models as they are: the failure modes of real small models (issue 31) ---------------

def as_a_model_server(
    reply: Callable[[str], str], *, stream_usage: bool = True, one_at_a_time: bool = False,
    endless: bool = False,
) -> Handler:
    """Answers chat completions with `reply(prompt)` as a real server does: the reply is cut at
    the request's `max_tokens` (a word a token here) with `finish_reason` "length".

    `stream_usage=False`: a stream never carries a usage chunk, even when asked (some servers).
    `one_at_a_time`: requests are served one after another, as llama.cpp's server does with
    one slot; `in_flight_peak` on the handler is the most requests that waited at once.
    `endless`: the reply never ends; without `max_tokens` the server keeps the request open
    until it shuts down (a model that never stops, as seen from the client).
    """
    serving = threading.Lock()
    waiting = [0, 0]  # now, peak
    count_lock = threading.Lock()

    def handle(request: Request) -> Answer:
        if request.method != "POST" or request.path not in CHAT_PATHS:
            return _openai_error(404, f"no route {request.method} {request.path}")
        body = request.json or {}
        limit = body.get("max_tokens")
        if endless and limit is None:
            return Stall(3600)
        with count_lock:
            waiting[0] += 1
            waiting[1] = max(waiting)
        try:
            if one_at_a_time:
                with serving:
                    return _model_reply(reply, request, body, limit, stream_usage)
            return _model_reply(reply, request, body, limit, stream_usage)
        finally:
            with count_lock:
                waiting[0] -= 1

    handle.in_flight_peak = lambda: waiting[1]  # type: ignore[attr-defined]
    return handle


def _model_reply(reply: Callable[[str], str], request: Request, body: dict, limit: int | None, usage: bool) -> Reply:
    prompt = message_text(request)
    content = reply(prompt)
    pieces = re.findall(r"\s*\S+", content)
    finish = "stop"
    if limit is not None and len(pieces) > limit:
        content, finish = "".join(pieces[:limit]), "length"
    model = body.get("model", "unknown")
    if body.get("stream"):
        asked = bool((body.get("stream_options") or {}).get("include_usage"))
        return stream_chunks(content, model=model, prompt_text=prompt, usage=asked and usage, finish_reason=finish)
    return Reply(200, chat_completion(content, model=model, prompt_text=prompt, finish_reason=finish))


def never_stops(prompt: str) -> str:
    """A model that rambles until its length limit (the server's context, without one)."""
    return " ".join(["and"] * 100_000)


def echoes(prompt: str) -> str:
    """A model that repeats the prompt back."""
    return prompt


def ten(prompt: str) -> str:
    """A model that answers "10" to everything."""
    return "10"


def prose(prompt: str) -> str:
    """A model that talks around its number: a real SmolLM2 reply to a grade prompt."""
    return "The document is irrelevant to 10."


# --- Tavily search -----------------------------------------------------------------------


def tavily_result(title: str, url: str, content: str, score: float = 0.9) -> dict[str, Any]:
    """One entry of a Tavily search response's `results`."""
    return {"title": title, "url": url, "content": content, "score": score, "raw_content": None}


def tavily_search(results: Callable[[dict], list[dict]] | list[dict]) -> Handler:
    """Answers `POST /search` in Tavily's response shape; `results` may depend on the body."""

    def handle(request: Request) -> Reply:
        if request.method != "POST" or request.path != "/search":
            return Reply(404, {"detail": {"error": f"no route {request.method} {request.path}"}})
        body = request.json or {}
        found = results(body) if callable(results) else list(results)
        found = found[: body.get("max_results") or len(found)]
        response = {
            "query": body.get("query", ""),
            "follow_up_questions": None,
            "answer": None,
            "images": [],
            "results": found,
            "response_time": 0.01,
            "request_id": f"loopback-{next(_ids)}",
        }
        return Reply(200, response)

    return handle


def failing(status: int, body: Any = None) -> Handler:
    """Answers every request with `status` and `body` (by default in Tavily's error shape)."""
    body = body if body is not None else {"detail": {"error": "server exploded"}}
    return lambda request: Reply(status, body)


@contextmanager
def uvicorn_serving(app: Any, **config: Any) -> Iterator[str]:
    """An ASGI `app` under uvicorn on a free loopback port, in a thread; yields the base URL.
    `config`: more of uvicorn's settings (`log_level="info"` for its access log)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, **{"log_level": "warning", **config}))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
