"""`crag serve`'s connections, before any request reaches the app (issue 41): a connection that
never finishes its headers is closed after `[server] header_timeout`, and at most
`max_connections` are open, a new one displacing the one waiting longest for its headers.
Each against a real uvicorn server on loopback with the protocol `crag serve` gives it, for
both of uvicorn's HTTP/1.1 parsers."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from support.loopback import uvicorn_serving
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from crag.app.server.ops.transport import guarded_protocol, log_config
from crag.config.runs import ServerSettings

PARSERS = pytest.mark.parametrize("parser", [H11Protocol, HttpToolsProtocol], ids=["h11", "httptools"])
HALF = b"GET /health HT"  # half a request line


class Holding:
    """A small ASGI app: `/hold` answers once `release` is set, anything else at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.holding = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/hold":
            self.holding += 1
            while not self.release.is_set():
                await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


@contextmanager
def serving(app: Holding, parser: type, **server: Any) -> Iterator[tuple[str, int]]:
    """`app` under uvicorn with `crag serve`'s guarded `parser`; yields (host, port)."""
    protocol = guarded_protocol(ServerSettings(**server), parser)
    with uvicorn_serving(app, http=protocol, log_config=log_config()) as url:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        yield host, int(port)


def connect(address: tuple[str, int], send: bytes) -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    if send:
        sock.sendall(send)
    return sock


def closed(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (it sent nothing else on these connections)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)


def until(holds: Callable[[], bool], seconds: float = 20.0) -> None:
    """Poll `holds` until it is true; fails after `seconds` (a guard against a hang, not a measure)."""
    deadline = time.monotonic() + seconds
    while not holds():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def answer(sock: socket.socket) -> bytes:
    """What the server sends on `sock` until it closes it or a reply of 2 bytes is in."""
    got = b""
    while not got.endswith(b"\r\n\r\nok"):
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            break
        got += chunk
    return got


def answers(url: str) -> bool:
    """Whether a new connection to `url` is answered 200 at /health."""
    try:
        return httpx.get(f"{url}/health").status_code == 200
    except httpx.TransportError:
        return False


@PARSERS
def test_a_connection_that_does_not_finish_its_headers_is_closed(parser: type) -> None:
    app = Holding()
    with serving(app, parser, header_timeout=0.5) as address:
        held = connect(address, b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")  # headers in: not timed
        until(lambda: app.holding == 1)
        silent = connect(address, b"")  # opens and sends nothing
        slow = [connect(address, HALF) for _ in range(20)]
        again = connect(address, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer(again).startswith(b"HTTP/1.1 200")
        again.sendall(HALF)  # a kept-alive connection's next request, half sent
        with httpx.Client(base_url=f"http://{address[0]}:{address[1]}") as client:
            assert client.get("/health").status_code == 200  # meanwhile others are answered

        until(lambda: all(closed(s) for s in [silent, again, *slow]))
        assert not closed(held)  # older than the timeout, but its headers came in time
        app.release.set()
        assert answer(held).startswith(b"HTTP/1.1 200")
        for sock in [held, silent, again, *slow]:
            sock.close()


@PARSERS
def test_at_the_cap_a_new_connection_displaces_the_one_waiting_longest(parser: type) -> None:
    cap = 20
    with serving(Holding(), parser, header_timeout=300, max_connections=cap) as address:
        slow = [connect(address, HALF) for _ in range(3 * cap)]
        with httpx.Client(base_url=f"http://{address[0]}:{address[1]}") as client:
            assert client.get("/health").status_code == 200  # past the cap, at once

        until(lambda: sum(closed(s) for s in slow) >= 2 * cap)  # the header timeout is far off
        left = [i for i, s in enumerate(slow) if not closed(s)]
        assert len(left) < cap and min(left) >= 2 * cap  # the newest stay
        for sock in slow:
            sock.close()


@PARSERS
def test_at_the_cap_with_every_connection_busy_a_new_one_is_closed(parser: type) -> None:
    app = Holding()
    with serving(app, parser, max_connections=3) as address:
        busy = [connect(address, b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n") for _ in range(3)]
        until(lambda: app.holding == 3)
        refused = connect(address, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer(refused) == b""  # closed unanswered; the busy ones are kept
        app.release.set()
        assert all(answer(sock).startswith(b"HTTP/1.1 200") for sock in busy)
        for sock in busy:
            sock.close()
        until(lambda: answers(f"http://{address[0]}:{address[1]}"))  # room again once they are gone
        refused.close()
