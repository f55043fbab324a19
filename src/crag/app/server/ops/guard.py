"""What every request passes before anything else reads it, as one ASGI middleware (one pass,
little CPU): no outside events to a run, a bounded body, and, with no API key, loopback only.

- `POST /events/{id}` is refused (405): a crag run waits for no outside event, so an event
  sent to one could only disturb it (the server's route would deliver it to every step).
- A body longer than `[server] max_body_bytes` is a 413, told by its Content-Length at once,
  or, for a chunked body, as soon as what arrived passes the cap: no more than the cap is held.
- A key-like query parameter (`?key=`, `?api_key=`, `?token=`, or any holding a key) has its
  value replaced, and one named by a key (`?KEY`, `?KEY=1`) is replaced whole, before anything
  reads it (`hide_query_secrets`): crag takes its key from headers only, and the access log
  prints the request's query from this same scope (and passes it through `hide_secrets`,
  ops/transport.py, as it does the path).
- Without an API key anyone who can connect may ask, so the server must be reachable only
  from this machine: it binds loopback only (`check_bind`), and a request whose `Host` is not
  a loopback name (DNS rebinding: a web page's own name resolving to 127.0.0.1) or whose
  `Origin` is not the server's own (another site's page in the user's browser) is a 403.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import unquote_plus

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crag.app.server.openai.errors import refusal as refuse
from crag.errors import ConfigError, redact

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
SECRET_PARAM = re.compile(r"key|token|secret|passw|auth|signature", re.IGNORECASE)
HIDDEN = b"redacted"


def hide_query_secrets(scope: Scope) -> None:
    """Replace, in `scope` itself, the value of every query parameter that is named like a
    secret or holds one (`crag.errors.redact`: this server's keys, anything shaped like a key),
    and the whole of one whose name holds one; plain or percent-encoded.

    In place, as uvicorn's access log reads the path and query from the very scope the app was
    given, when the response is sent; no route of crag's reads a secret from the query.
    """
    query: bytes = scope.get("query_string", b"")
    if not query:
        return
    params = query.split(b"&")
    for i, param in enumerate(params):
        name, _, value = param.partition(b"=")
        name_text = unquote_plus(name.decode("latin-1"))
        value_text = unquote_plus(value.decode("latin-1"))
        if redact(name_text) != name_text:  # the key as the name, `?KEY` or `?KEY=1`
            params[i] = HIDDEN
        elif (value and SECRET_PARAM.search(name_text)) or redact(value_text) != value_text:
            params[i] = name + b"=" + HIDDEN
    scope["query_string"] = b"&".join(params)


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, without port) can only be reached from this machine."""
    if host.lower() in LOOPBACK_NAMES or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str) -> None:
    """Refuse to listen beyond loopback without an API key."""
    if not api_key and not is_loopback(host):
        raise ConfigError(
            f"server.host {host} listens beyond this machine, and no API key is set: anyone who can "
            "connect could ask and read every run. Set CRAG_API_KEY (or [server] api_key), or "
            "listen on 127.0.0.1."
        )


def _host_name(host_header: str) -> str:
    """The name in a Host header, without its port ("[::1]:8000" -> "[::1]")."""
    if host_header.startswith("["):
        return host_header[: host_header.find("]") + 1]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class RequestGuard:
    """See the module docstring. `local_only`: the Host and Origin checks (no API key)."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, local_only: bool) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.local_only = local_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hide_query_secrets(scope)
        refusal = self._refusal(scope)
        if refusal is None and scope["method"] in BODY_METHODS:
            refusal, receive = await self._bounded(scope, receive)
        if refusal is not None:
            status, detail, headers = refusal
            await refuse(scope, status, detail, headers)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, str, dict[str, str] | None] | None:
        path, method = scope["path"], scope["method"]
        if method == "POST" and path.startswith("/events/"):
            return 405, ("A crag run waits for no outside event: nothing may be sent to it. "
                         "To stop a run, POST /handlers/{handler_id}/cancel."), {"Allow": "GET"}
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            return 413, self._too_large(), None
        if self.local_only:
            host = headers.get("host", "")
            if not is_loopback(_host_name(host)):
                return 403, ("This server has no API key, so it answers only requests addressed to "
                             "this machine (Host: 127.0.0.1 or localhost)."), None
            origin = headers.get("origin")
            if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
                return 403, ("Cross-origin requests are refused: this server has no API key, and a "
                             "web page from another origin must not use it."), None
        return None

    async def _bounded(self, scope: Scope, receive: Receive) -> tuple[tuple | None, Receive]:
        """Read the body up to the cap; a refusal if it goes past, else a replaying `receive`."""
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:
                return (413, self._too_large(), None), receive
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        body = b"".join(m.get("body", b"") for m in messages)
        replayed = [{"type": "http.request", "body": body, "more_body": False}]
        if messages[-1]["type"] != "http.request":
            replayed = [messages[-1]]  # the client went away

        async def replay() -> Message:
            return replayed.pop() if replayed else await receive()

        return None, replay

    def _too_large(self) -> str:
        return (f"The request body is larger than {self.max_body_bytes} bytes ([server] "
                "max_body_bytes); a question is at most a few thousand characters.")
