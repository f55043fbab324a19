"""The MCP door of a `crag serve` with two collections, driven by the official `mcp` client over
streamable HTTP: each key's tools and resources see its own collection only, and a collection
or a run of another answers exactly as one that does not exist. Each secret is shown to be
reachable by its own key first, so that its absence elsewhere says something."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette
from support.loopback import uvicorn_serving
from support.secret_collections import (
    DEFAULT_FILE,
    DEFAULT_QUESTION,
    DEFAULT_SECRET,
    HR_FILE,
    HR_QUESTION,
    HR_SECRET,
    key_for,
    secret_settings,
)

from crag.app.mcp_engine import Engine
from crag.app.server import build_server
from crag.app.server.routes.mcp import mcp_routes

MISSING_RUN = "0123456789abcdef0123456789abcdef"  # shaped like a run id, never one


@dataclass(frozen=True)
class Served:
    url: str  # behind crag's door: the key decides
    bare: str  # the /mcp route alone, with no door in front: nobody is known
    team: str  # a key that asks the default collection only
    hr: str  # a key that asks "hr" only


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("mcp-collections")
    settings = secret_settings(tmp)
    team, hr = key_for(settings, "team", ["default"]), key_for(settings, "hr-bot", ["hr"])
    crag_server = build_server(settings)
    engine = Engine.ready(settings, crag_server.runs)

    @asynccontextmanager
    async def sessions(app: Starlette) -> AsyncIterator[None]:
        async with engine.sessions():
            yield

    bare_app = Starlette(routes=mcp_routes(engine), lifespan=sessions)
    with uvicorn_serving(crag_server.app) as url, uvicorn_serving(bare_app) as bare:
        yield Served(url, bare, team, hr)


@asynccontextmanager
async def mcp_as(url: str, token: str | None) -> AsyncIterator[tuple[Client, httpx2.AsyncClient]]:
    """The official client on `url`/mcp, sending `token` (its HTTP client, to change it mid-session)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=60)
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
        yield client, http


async def refused(client: Client, tool: str, arguments: dict) -> str:
    """The tool's error text (it must be one)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error and result.structured_content is None
    return result.content[0].text


async def unreadable(client: Client, uri: str) -> str:
    """The resource's error message (it must be one)."""
    with pytest.raises(MCPError) as caught:
        await client.read_resource(uri)
    return str(caught.value)


def shows_no_secret(text: str) -> bool:
    """Nothing of either collection: neither secret, nor either secret's file name."""
    return not any(shown in text for shown in (DEFAULT_SECRET, DEFAULT_FILE, HR_SECRET, HR_FILE))


async def test_each_key_asks_and_searches_its_own_collection_and_no_other(served: Served) -> None:
    async with mcp_as(served.url, served.hr) as (hr, _), mcp_as(served.url, served.team) as (team, _):
        assert (await hr.call_tool("collections", {})).structured_content == {"collections": ["hr"]}
        assert (await team.call_tool("collections", {})).structured_content == {"collections": ["default"]}

        own = await hr.call_tool("ask", {"question": HR_QUESTION, "collection": "hr"})
        assert not own.is_error and own.structured_content["collection"] == "hr"
        assert {s["citation"] for s in own.structured_content["sources"] if s["kind"] == "internal"} == {HR_FILE}
        found = await hr.call_tool("search", {"question": HR_QUESTION, "collection": "hr"})
        assert HR_SECRET in found.structured_content["chunks"][0]["text"]
        # Its own collection, asked the other's question: only its own chunks come back.
        crossed = await hr.call_tool("search", {"question": DEFAULT_QUESTION, "collection": "hr"})
        assert {h["source"] for h in crossed.structured_content["chunks"]} == {HR_FILE}
        assert DEFAULT_SECRET not in json.dumps(crossed.structured_content)

        # The other collection, named: refused as a collection that does not exist.
        for client, other, question in ((hr, "default", DEFAULT_QUESTION), (team, "hr", HR_QUESTION)):
            for tool in ("ask", "search"):
                said = await refused(client, tool, {"question": question, "collection": other})
                assert said == f"Error executing tool {tool}: No collection {other!r}."
                unknown = await refused(client, tool, {"question": question, "collection": "payroll"})
                assert unknown == said.replace(repr(other), repr("payroll"))
                assert shows_no_secret(said)
        # Naming none is the key's only collection: hr's, never the default's.
        for tool in ("ask", "search"):
            unnamed = await hr.call_tool(tool, {"question": DEFAULT_QUESTION})
            assert not unnamed.is_error and unnamed.structured_content["collection"] == "hr"
            shown = json.dumps(unnamed.structured_content)
            assert DEFAULT_SECRET not in shown and DEFAULT_FILE not in shown


async def test_a_run_of_another_collection_has_no_trace_for_this_key(served: Served) -> None:
    async with mcp_as(served.url, served.hr) as (hr, _), mcp_as(served.url, served.team) as (team, _):
        theirs = await team.call_tool("ask", {"question": DEFAULT_QUESTION})
        assert not theirs.is_error and theirs.structured_content["collection"] == "default"
        team_run = theirs.structured_content["run_id"]
        assert DEFAULT_SECRET in (await team.read_resource(f"crag://runs/{team_run}/trace")).contents[0].text
        ours = await hr.call_tool("ask", {"question": HR_QUESTION, "collection": "hr"})
        hr_run = ours.structured_content["run_id"]
        assert HR_SECRET in (await hr.read_resource(f"crag://runs/{hr_run}/trace")).contents[0].text

        for client, run in ((hr, team_run), (team, hr_run)):
            said = await unreadable(client, f"crag://runs/{run}/trace")
            missing = await unreadable(client, f"crag://runs/{MISSING_RUN}/trace")
            assert said.replace(run, MISSING_RUN) == missing and shows_no_secret(said)


async def test_a_key_reads_its_own_collections_manifest_only(served: Served) -> None:
    async with mcp_as(served.url, served.hr) as (hr, _), mcp_as(served.url, served.team) as (team, _):
        own = json.loads((await hr.read_resource("crag://collections/hr/manifest")).contents[0].text)
        assert own["collection"] == "hr" and [f["name"] for f in own["files"].values()] == [HR_FILE]
        default = json.loads((await team.read_resource("crag://index/manifest")).contents[0].text)
        assert DEFAULT_FILE in {f["name"] for f in default["files"].values()} and HR_FILE not in json.dumps(default)
        unnamed = json.loads((await hr.read_resource("crag://index/manifest")).contents[0].text)
        assert unnamed == own  # naming none: the key's only collection, never the default

        for client, uris in (
            (hr, ["crag://index/manifest?collection=default", "crag://collections/default/manifest"]),
            (team, ["crag://index/manifest?collection=hr", "crag://collections/hr/manifest"]),
        ):
            for uri in uris:
                said = await unreadable(client, uri)
                other = "default" if client is hr else "hr"
                assert said == (await unreadable(client, uri.replace(other, "payroll"))).replace("payroll", other)
                assert str(default["chunks"]) not in said and str(own["chunks"]) not in said
                assert shows_no_secret(said)


async def test_each_call_of_a_session_is_judged_by_its_own_requests_key(served: Served) -> None:
    async with mcp_as(served.url, served.team) as (client, http):
        assert (await client.call_tool("collections", {})).structured_content == {"collections": ["default"]}
        http.headers["Authorization"] = f"Bearer {served.hr}"  # the session the team key opened, now hr's
        assert (await client.call_tool("collections", {})).structured_content == {"collections": ["hr"]}
        said = await refused(client, "search", {"question": DEFAULT_QUESTION, "collection": "default"})
        assert said == "Error executing tool search: No collection 'default'."
        await unreadable(client, "crag://index/manifest?collection=default")


async def test_without_a_door_saying_who_asks_the_tools_see_nothing(served: Served) -> None:
    async with mcp_as(served.bare, None) as (client, _):
        assert (await client.call_tool("collections", {})).structured_content == {"collections": []}
        for collection in ("default", "hr", None):
            arguments = {"question": DEFAULT_QUESTION, **({"collection": collection} if collection else {})}
            for tool in ("ask", "search"):
                said = await refused(client, tool, arguments)
                assert shows_no_secret(said)
        await unreadable(client, "crag://index/manifest")
        await unreadable(client, "crag://collections/hr/manifest")
