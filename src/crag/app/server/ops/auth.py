"""API key check for every route but /health, as Starlette (ASGI) middleware."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from crag.app.server.openai.errors import refusal
from crag.app.server.ops.guard import hide_query_secrets

# Load balancers probe /health without a key; / is the live page, which asks for the key.
OPEN_PATHS = frozenset({"/health", "/"})


class ApiKeyMiddleware:
    """Answers 401 unless the request carries the key as `Authorization: Bearer KEY` or
    `X-API-Key: KEY`. Compared in constant time; the key is never logged or echoed."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        if not api_key:
            raise ValueError("ApiKeyMiddleware needs a non-empty key")
        self.app = app
        self._key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":  # outermost: before a refusal is logged with the query
            hide_query_secrets(scope)
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or self._allowed(Headers(scope=scope)):
            await self.app(scope, receive, send)
            return
        response = refusal(
            scope, 401, "Missing or wrong API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'.",
            headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)

    def _allowed(self, headers: Headers) -> bool:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        offered = token.strip() if scheme.lower() == "bearer" else headers.get("x-api-key", "")
        # compare_digest on bytes: constant time in the key's content, and no str surprises.
        return hmac.compare_digest(offered.encode(), self._key)
