"""Who is asking: the request's key made a `crag.app.access.Principal`, as ASGI middleware.

`ApiKeyMiddleware` takes the key from `Authorization: Bearer KEY` or `X-API-Key: KEY`: the
server's own key (`[server] api_key`) is `ADMIN`; a key of the key ring (`crag keys`) its own
principal; anything else a 401, except on /health and / (open: `NOBODY` there, who sees
nothing, unless a valid key came). `LocalOnly` is the door of a server with no key at all:
everyone is `LOCAL`, and `RequestGuard` lets only this machine in.
"""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crag.app.access import ADMIN, LOCAL, NOBODY, Principal, set_principal
from crag.app.keys import KeyRing
from crag.app.server.openai.errors import refusal
from crag.app.server.ops.guard import hide_query_secrets

# Load balancers probe /health without a key; / is the live page, which asks for the key.
OPEN_PATHS = frozenset({"/health", "/"})
REFUSED = "Missing or wrong API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'."


class ApiKeyMiddleware:
    """Resolves the request's key into its principal (module docstring), or answers 401. The
    server's key is compared in constant time, a ring key by its scrypt hash (`KeyRing`);
    neither is logged or echoed. A response to a ring key whose key is revoked while it is
    sent (a stream) is ended at its next chunk."""

    def __init__(self, app: ASGIApp, *, admin_key: str = "", keyring: KeyRing | None = None) -> None:
        if not admin_key and keyring is None:
            raise ValueError("ApiKeyMiddleware needs the server's key, a key ring, or both")
        self.app = app
        self._admin = admin_key.encode()
        self.keyring = keyring

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hide_query_secrets(scope)  # outermost: before a refusal is logged with the query
        principal = await self._principal(Headers(scope=scope))
        if principal is None and scope["path"] in OPEN_PATHS:
            principal = NOBODY
        if principal is None:
            await refusal(scope, 401, REFUSED, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        set_principal(scope, principal)
        if principal.key_id is None or self.keyring is None:
            await self.app(scope, receive, send)
        else:
            await self._while_known(principal.key_id, scope, receive, send)

    async def _principal(self, headers: Headers) -> Principal | None:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        offered = token.strip() if scheme.lower() == "bearer" else headers.get("x-api-key", "")
        if not offered:
            return None
        # compare_digest on bytes: constant time in the key's content, and no str surprises.
        if self._admin and hmac.compare_digest(offered.encode(), self._admin):
            return ADMIN
        return await self.keyring.resolve(offered) if self.keyring is not None else None

    async def _while_known(self, key_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app, ending its response as soon as the ring no longer knows `key_id`: a
        401 if nothing was sent yet, else the body ended at its next chunk. The app is then
        stopped as if the client had gone (`ClientDisconnect` from `send`)."""
        keyring = self.keyring
        assert keyring is not None
        ended = False

        async def send_while_known(message: Message) -> None:
            nonlocal ended
            if ended:
                return  # what the app sends after: to nobody
            kind = message["type"]
            if (kind == "http.response.start" or (kind == "http.response.body" and message.get("more_body"))) \
                    and not keyring.known(key_id):
                ended = True
                if kind == "http.response.start":
                    await refusal(scope, 401, REFUSED, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
                else:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                raise ClientDisconnect()
            await send(message)

        try:
            await self.app(scope, receive, send_while_known)
        except Exception:
            if not ended:
                raise  # else: the app stopping as told, in whatever form it stops


class LocalOnly:
    """The door of a server with no key: every request is `LOCAL`, this machine's own user
    (`RequestGuard(local_only=True)` refuses any other)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            set_principal(scope, LOCAL)
        await self.app(scope, receive, send)
