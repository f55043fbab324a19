"""The door (crag.app.server.ops.auth): the server's own key is admin, a ring key its own scoped
principal, a wrong or garbled token a 401 that costs no scrypt, the open paths open to nobody,
a server with no key local; and a key revoked while its response streams ends that response
at its next chunk."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient
from support.keys import count_scrypts
from support.loopback import uvicorn_serving
from support.serving import running, server_settings

from crag.app.access import principal_of
from crag.app.keys import KeyRing, create_key, revoke_key
from crag.app.server.ops.auth import ApiKeyMiddleware, LocalOnly
from crag.app.server.ops.guard import hide_query_secrets

ADMIN_KEY = "PLANTED.admin.7e11"


async def who(request: Request) -> JSONResponse:
    p = principal_of(request.scope)
    return JSONResponse({"name": p.name, "key_id": p.key_id, "sees": [c for c in ("hr", "legal") if p.sees(c)]})


def door(ring: KeyRing | None, admin_key: str = "", *routes: Route) -> Starlette:
    return Starlette(
        routes=[Route("/who", who), Route("/health", who), *routes],
        middleware=[Middleware(ApiKeyMiddleware, admin_key=admin_key, keyring=ring)],
    )


@pytest.fixture
def ring(tmp_path: Path) -> tuple[KeyRing, dict[str, str]]:
    path = tmp_path / "keys.json"
    tokens = {name: create_key(path, name, [name])[1] for name in ("hr", "legal")}
    return KeyRing(path), tokens


def test_the_servers_own_key_is_admin_and_a_ring_key_sees_its_collections(ring: tuple[KeyRing, dict[str, str]]) -> None:
    keyring, tokens = ring
    with TestClient(door(keyring, ADMIN_KEY)) as client:
        admin = client.get("/who", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()
        assert admin == {"name": "admin", "key_id": None, "sees": ["hr", "legal"]}
        hr = client.get("/who", headers={"Authorization": f"Bearer {tokens['hr']}"}).json()
        assert hr["name"] == "hr" and hr["key_id"] and hr["sees"] == ["hr"]
        legal = client.get("/who", headers={"X-API-Key": tokens["legal"]}).json()
        assert legal["sees"] == ["legal"]


def test_the_servers_own_key_alone_is_admin() -> None:
    with TestClient(door(None, ADMIN_KEY)) as client:
        assert client.get("/who", headers={"X-API-Key": ADMIN_KEY}).json()["name"] == "admin"
        assert client.get("/who").status_code == 401


def test_wrong_or_garbled_tokens_are_refused_without_scrypt(
    ring: tuple[KeyRing, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    keyring, tokens = ring
    scrypts = count_scrypts(monkeypatch)
    hr = tokens["hr"]
    offered = [
        {}, {"Authorization": "Bearer "}, {"Authorization": hr}, {"Authorization": f"Basic {hr}"},
        {"X-API-Key": ""}, {"X-API-Key": hr[:-1]}, {"X-API-Key": hr + "A"}, {"X-API-Key": "crag_" + "0" * 12 + hr[17:]},
        {"X-API-Key": ADMIN_KEY}, {"X-API-Key": "x" * 10_000},
    ]
    with TestClient(door(keyring)) as client:  # a ring, no server key: "" is no key
        for headers in offered:
            refused = client.get("/who", headers=headers)
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
            assert refused.json() == {"detail": "Missing or wrong API key: send 'Authorization: Bearer KEY' "
                                                "or 'X-API-Key: KEY'."}
            assert hr not in refused.text
        assert scrypts == []
        wrong = f"{hr[:18]}{'A' * 43}"  # the id of a key, a wrong secret: one scrypt, then remembered
        for _ in range(3):
            assert client.get("/who", headers={"X-API-Key": wrong}).status_code == 401
        assert len(scrypts) == 1
        for _ in range(3):
            assert client.get("/who", headers={"X-API-Key": hr}).status_code == 200
        assert len(scrypts) == 2


def test_open_paths_answer_nobody_unless_a_valid_key_came(ring: tuple[KeyRing, dict[str, str]]) -> None:
    keyring, tokens = ring
    with TestClient(door(keyring, ADMIN_KEY)) as client:
        assert client.get("/health").json() == {"name": "nobody", "key_id": None, "sees": []}
        assert client.get("/health", headers={"X-API-Key": "wrong"}).json()["name"] == "nobody"
        assert client.get("/health", headers={"X-API-Key": tokens["hr"]}).json()["sees"] == ["hr"]
        assert client.get("/health", headers={"X-API-Key": ADMIN_KEY}).json()["name"] == "admin"


def test_a_server_with_no_key_is_local() -> None:
    app = Starlette(routes=[Route("/who", who)], middleware=[Middleware(LocalOnly)])
    with TestClient(app) as client:
        assert client.get("/who").json() == {"name": "local", "key_id": None, "sees": ["hr", "legal"]}


def test_a_key_revoked_before_its_answer_is_sent_gets_a_401(ring: tuple[KeyRing, dict[str, str]]) -> None:
    keyring, tokens = ring

    async def slow(request: Request) -> JSONResponse:
        await asyncio.to_thread(lambda: (revoke_key(keyring.path, "hr"), keyring.refresh()))  # while it "runs"
        return JSONResponse({"answer": "SECRET of hr"})

    with TestClient(door(keyring, "", Route("/slow", slow))) as client:
        answered = client.get("/slow", headers={"X-API-Key": tokens["hr"]})
        assert answered.status_code == 401 and "SECRET" not in answered.text
        assert client.get("/who", headers={"X-API-Key": tokens["hr"]}).status_code == 401
        assert client.get("/who", headers={"X-API-Key": tokens["legal"]}).status_code == 200


def test_a_key_revoked_mid_stream_ends_the_stream_at_its_next_chunk(ring: tuple[KeyRing, dict[str, str]]) -> None:
    keyring, tokens = ring
    pulled: list[str] = []

    async def stream(request: Request) -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            pulled.append("first")
            yield b"data: first\n\n"
            if request.query_params.get("revoke"):
                await asyncio.to_thread(lambda: (revoke_key(keyring.path, "hr"), keyring.refresh()))
            for n in range(3):
                pulled.append(f"secret{n}")
                yield f"data: SECRET {n} of hr\n\n".encode()

        return StreamingResponse(chunks(), media_type="text/event-stream")

    errors: list[str] = []
    uvicorn_errors = logging.getLogger("uvicorn.error")
    keep = logging.Handler(logging.WARNING)
    keep.emit = lambda record: errors.append(record.getMessage())  # type: ignore[method-assign]
    with uvicorn_serving(door(keyring, "", Route("/stream", stream))) as url:
        uvicorn_errors.addHandler(keep)
        try:
            whole = httpx.get(f"{url}/stream", headers={"X-API-Key": tokens["legal"]})  # another key: untouched
            assert whole.text.count("SECRET") == 3
            pulled.clear()
            with httpx.stream("GET", f"{url}/stream?revoke=1", headers={"X-API-Key": tokens["hr"]}) as response:
                assert response.status_code == 200
                received = b"".join(response.iter_bytes())  # ends cleanly: no error reading it
            assert received == b"data: first\n\n"
            assert pulled == ["first", "secret0"]  # the app stopped: nothing pulled after the refused chunk
            assert httpx.get(f"{url}/who", headers={"X-API-Key": tokens["hr"]}).status_code == 401
        finally:
            uvicorn_errors.removeHandler(keep)
    assert errors == []  # no "Exception in ASGI application"


def test_a_ring_token_in_the_query_is_hidden_from_the_access_log(ring: tuple[KeyRing, dict[str, str]]) -> None:
    _, tokens = ring
    for query in (f"q={tokens['hr']}", tokens["hr"], f"model=crag&x={tokens['legal']}"):
        scope = {"type": "http", "query_string": query.encode()}
        hide_query_secrets(scope)
        assert tokens["hr"].encode() not in scope["query_string"]
        assert tokens["legal"].encode() not in scope["query_string"]


def test_crag_serve_refuses_a_key_within_seconds_of_its_revocation(sample_index_dir: Path, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    _, token = create_key(keys, "reader", ["default"])
    settings = server_settings(sample_index_dir, store=str(tmp_path / "server.db"), keys_file=keys)
    with running(settings) as url:
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{url}/handlers", headers=headers).status_code == 200
        assert httpx.get(f"{url}/handlers").status_code == 401
        revoke_key(keys, "reader")
        for _ in range(500):  # bounded: 10 s for what takes about one
            if httpx.get(f"{url}/handlers", headers=headers).status_code == 401:
                break
            time.sleep(0.02)
        else:
            pytest.fail("the revoked key was still accepted after 10 s")
