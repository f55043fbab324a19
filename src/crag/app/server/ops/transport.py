"""Connections, before any request reaches the app (and so before any key is checked): how
`crag serve` has uvicorn accept, time and log them (`uvicorn_options`).

- **Header timeout.** A connection must send a request's complete headers within `[server]
  header_timeout` seconds of opening, or of its previous response; else it is closed. uvicorn
  has no such timeout (its `timeout_keep_alive` stops as soon as one byte arrives): a
  connection that sends half a request line is otherwise held for ever.
- **Connection cap.** At most `[server] max_connections` are open. At the cap a new connection
  takes the place of the one that has waited longest for its headers (a slow or idle one);
  when every open connection is busy with a request, the new one is closed at once. A flood of
  slow connections so displaces only itself, and a client that sends its request at once is
  answered. uvicorn's `limit_concurrency` does not do this: it answers 503 once the headers
  are read, counting the slow connections too, so /health would be refused with the rest.
- **Logs.** uvicorn's access and error logs pass every line through `hide_secrets`: a key in
  a path or a query, as a parameter's name or value, plain or percent-encoded, is printed
  as `[redacted]` (`crag.errors.redact`: this server's keys and anything shaped like a key).

Both protocols uvicorn speaks HTTP/1.1 with (httptools when installed, else h11) are guarded
the same way, by a subclass that reads only their public attributes: `connections` (uvicorn's
set of open ones), `cycle` (the request now read; `None` before the first) and its
`response_complete`.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import sys
from typing import Any, ClassVar
from urllib.parse import quote, unquote, unquote_plus

from uvicorn.config import LOGGING_CONFIG

from crag.config.runs import ServerSettings
from crag.errors import redact

# What stays readable when a decoded path or query is printed again after redaction.
SHOWN = "/?&=:@+,;!$'()*~[]"
# Files the server holds besides its connections: the index, the store, libraries, pipes.
OWN_FILES = 256


def hide_secrets(text: str) -> str:
    """`text` (a path, a query, a log line) with every key in it redacted, also where it is
    percent-encoded (then the whole of `text` is shown decoded, the key removed, re-encoded)."""
    text = redact(text)
    for decode in (unquote, unquote_plus):
        plain = decode(text)
        hidden = redact(plain)
        if hidden != plain:
            return quote(hidden, safe=SHOWN)
    return text


class HideSecrets(logging.Filter):
    """On a logger: its records' message and arguments (and traceback) pass `hide_secrets`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)  # a format string: decoding it could break its %s
        if isinstance(record.args, tuple):
            record.args = tuple(hide_secrets(a) if isinstance(a, str) else a for a in record.args)
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def log_config() -> dict[str, Any]:
    """uvicorn's own logging setup, with `HideSecrets` on each of its loggers (on the logger,
    not a handler, so that every handler anyone adds sees the lines redacted too)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["hide_secrets"] = {"()": HideSecrets}
    for logger in config["loggers"].values():
        logger["filters"] = [*logger.get("filters", []), "hide_secrets"]
    return config


class HeaderDeadline:
    """Mixed into one of uvicorn's HTTP protocol classes by `guarded_protocol`, which sets the
    class attributes: one class per server, its connections sharing `waiting` and `closing`."""

    header_timeout: ClassVar[float]
    max_connections: ClassVar[int]
    waiting: ClassVar[dict[HeaderDeadline, None]]  # waiting for headers, the longest first
    closing: ClassVar[set[HeaderDeadline]]  # displaced at the cap, not yet gone
    # uvicorn's, set by its protocol class
    connections: set[Any]
    cycle: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.deadline: asyncio.TimerHandle | None = None
        self.awaited: Any = None  # the request read last when the deadline was set
        self.refused = len(self.connections) - len(self.closing) >= self.max_connections and not self.make_room()
        if self.refused:
            transport.close()
            return
        super().connection_made(transport)
        self.await_headers()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # A request's headers are in (its response sets the next deadline), or the connection
        # was upgraded (a WebSocket) and is no longer HTTP's.
        if self.cycle is not self.awaited or self.transport.get_protocol() is not self:
            self.stop_waiting()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle.response_complete:  # not a pipelined next
            self.await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_waiting()
        self.closing.discard(self)
        if not self.refused:
            super().connection_lost(exc)

    def await_headers(self) -> None:
        if self.deadline is None:
            self.deadline = self.loop.call_later(self.header_timeout, self.expire)
            self.awaited = self.cycle
            self.waiting[self] = None

    def stop_waiting(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        self.waiting.pop(self, None)

    def expire(self) -> None:
        self.deadline = None
        self.waiting.pop(self, None)
        if self.cycle is self.awaited:  # no request's headers since the deadline was set
            self.drop()

    def drop(self) -> None:
        self.stop_waiting()
        self.closing.add(self)
        self.transport.close()

    def make_room(self) -> bool:
        """Close the connection that has waited longest for its headers; False if none waits."""
        if not self.waiting:
            return False
        next(iter(self.waiting)).drop()
        return True


def guarded_protocol(server: ServerSettings, base: type[asyncio.Protocol] | None = None) -> type[asyncio.Protocol]:
    """`base` (by default the one uvicorn would choose: httptools when installed, else h11)
    with `[server] header_timeout` and `max_connections`, as a class for `uvicorn.Config(http=)`."""
    if base is None:
        from uvicorn.protocols.http.auto import AutoHTTPProtocol as base
    attributes = {"header_timeout": server.header_timeout, "max_connections": server.max_connections,
                  "waiting": {}, "closing": set()}
    return type(f"Guarded{base.__name__}", (HeaderDeadline, base), attributes)


def make_room_for(connections: int) -> None:
    """Raise this process's soft limit on open files (Linux's default is 1024) so that it can
    hold `connections` sockets and its own files: at the limit, accepting waits a second at a
    time, and no client, /health's included, gets in. Never past the hard limit; a note if short."""
    if sys.platform == "win32":
        return
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + OWN_FILES
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    if raised < wanted:
        print(f"crag: {raised} open files allowed (ulimit -Hn): lower [server] max_connections to "
              f"{max(1, raised - OWN_FILES)} or raise the limit", file=sys.stderr)


def uvicorn_options(server: ServerSettings) -> dict[str, Any]:
    """What `crag serve` passes to `uvicorn.Config` beyond the app, host and port."""
    return {"http": guarded_protocol(server), "log_config": log_config()}
