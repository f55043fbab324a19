"""Errors in the shape OpenAI's API gives them, for the OpenAI-compatible door (`/v1/...`):

    {"error": {"message": "...", "type": "invalid_request_error", "param": "messages", "code": null}}

OpenAI's clients read `message` and `code` from this shape; the rest of crag's routes keep
their `{"detail": ...}`. `refusal` picks the shape by the request's path, so the checks every
request passes (the API key, the body limit) answer each caller in its own dialect, and
`unmatched` answers a `/v1/` path or method no route takes, which Starlette would answer in
plain text.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Match, Route
from starlette.types import Scope

OPENAI_PREFIX = "/v1/"
# The `type` OpenAI gives each status; anything else 4xx is a request error.
_TYPES = {401: "authentication_error", 403: "permission_error", 404: "invalid_request_error",
          429: "rate_limit_error", 503: "service_unavailable"}


def openai_error(
    status: int, message: str, *, param: str | None = None, code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """An OpenAI-shaped error response."""
    kind = _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def refusal(scope: Scope, status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """A refusal in the shape the route's callers expect: OpenAI's on `/v1/`, crag's elsewhere."""
    if scope.get("path", "").startswith(OPENAI_PREFIX):
        return openai_error(status, detail, code=_CODES.get(status), headers=headers)
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


_CODES = {401: "invalid_api_key", 413: "request_too_large"}


def unmatched(routes: list[Route]) -> Route:
    """The last `/v1/` route: a path no route in `routes` takes is a 404 ("Invalid URL", as
    OpenAI says it), a path one takes by another method a 405 with `Allow`."""
    known = ", ".join(f"{'/'.join(sorted(r.methods - {'HEAD'}))} {r.path_format}" for r in routes if r.methods)

    async def answer(request: Request) -> JSONResponse:
        method, path = request.method, request.url.path
        allowed = sorted({m for r in routes if r.matches(request.scope)[0] is Match.PARTIAL for m in r.methods or ()})
        if allowed:
            return openai_error(405, f"{method} is not allowed on {path}: use {' or '.join(allowed)}.",
                                headers={"Allow": ", ".join(allowed)})
        return openai_error(404, f"Invalid URL ({method} {path}): this server answers {known}.")

    return Route(f"{OPENAI_PREFIX}{{path:path}}", answer, methods=_ANY_METHOD)


# Named: a function route without methods takes GET alone.
_ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
