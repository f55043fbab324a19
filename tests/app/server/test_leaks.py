"""The leak suite (issue 41): one `crag serve` with two collections, each holding a secret, and
keys scoped to each. Every door and route is tried with one collection's key against the
other's runs, files, names and counts, through the clients a real caller uses: httpx against a
real uvicorn server, the official `openai` client, and the `mcp` client over streamable HTTP.
Each attempt must answer without the other collection's secret, file names, run ids, file ids
or index size; and where it names a thing the key may not see, exactly as for a thing that does
not exist (the same status and body, the name or id swapped).

Each side's secret is shown to reach its own key first (`world`), so that its absence
elsewhere says something. The MCP door's own attempts (ask, search and manifests naming the
other collection, MCP runs' traces) are in tests/app/test_mcp_collections.py; those here cross
doors (a run started over HTTP, read over MCP) or try odd names. The direction of each attempt
is its id's first part: `hr-key` tries the default collection's things, `team-key` hr's.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import httpx2
import openai
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from support.loopback import LoopbackServer, message_text, openai_chat, uvicorn_serving
from support.paths import SAMPLES
from support.postgres import postgres_url
from support.secret_collections import (
    DEFAULT_FILE,
    DEFAULT_QUESTION,
    DEFAULT_SECRET,
    HR_FILE,
    HR_QUESTION,
    HR_SECRET,
    key_for,
    secret_collections,
)
from support.serving import server_settings
from support.workflow import GatedGrader

from crag import ingest
from crag.app.keys import keys_file, revoke_key
from crag.app.server import CragServer, build_server
from crag.config import Settings
from crag.index.collections import collection_path

ADMIN_KEY = "crag-leaks-legacy-admin-key-5d1c"  # the single `[server] api_key`: admin
MISSING_RUN = "0123456789abcdef0123456789abcdef"  # shaped like a handler id, never one
MISSING_FILE = "0123456789abcdef"  # shaped like a file id, never one
MADE_UP = "payroll"  # a collection nobody has
WAIT = 60.0  # seconds: a bound on a condition that should hold in well under one


@dataclass
class Side:
    """One collection, with its own key, and everything of it the other key must never see."""

    collection: str
    model: str  # its workflow name and OpenAI model id
    token: str
    question: str
    secrets: list[str]
    files: list[str]
    runs: dict[str, str] = field(default_factory=dict)  # door -> handler id of a finished run
    run_ids: list[str] = field(default_factory=list)
    file_ids: list[str] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)  # (chunks, files), every version seen

    def markers(self) -> list[str]:
        return [*self.secrets, *self.files, *self.runs.values(), *self.run_ids, *self.file_ids]


@dataclass
class World:
    url: str
    root: Path
    settings: Settings
    server: CragServer
    http: httpx.Client
    sides: dict[str, Side]
    tokens: dict[str, str]  # the other keys, by name

    def get(self, path: str, token: str | None, **kwargs: Any) -> httpx.Response:
        return self.http.get(path, headers=auth(token) | kwargs.pop("headers", {}), **kwargs)

    def post(self, path: str, token: str | None, **kwargs: Any) -> httpx.Response:
        return self.http.post(path, headers=auth(token), **kwargs)

    def openai(self, token: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=token, max_retries=0, timeout=WAIT)


def auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def shows_nothing_of(body: bytes | str, side: Side, asked: str = "") -> None:
    """`body` holds none of `side`'s secrets, file names, run ids, file ids or index sizes,
    but for `asked`, what the caller sent (a refusal may quote it: that tells nothing)."""
    text = body if isinstance(body, str) else body.decode("utf-8", "replace")
    text = text.replace(asked, "<asked>") if asked else text
    crossed = [marker for marker in side.markers() if marker in text]
    crossed += [f"{chunks} chunks, {files} files" for chunks, files in side.sizes
                if re.search(rf'"chunks":\s*{chunks},\s*"files":\s*{files}\b', text)]
    assert not crossed, f"{side.collection}'s {crossed} crossed into: {text[:300]}"


def same_as_missing(got: httpx.Response, missing: httpx.Response, asked: str, made_up: str) -> None:
    """`got` (asking `asked`) answers as `missing` (asking `made_up`, which does not exist)."""
    assert got.status_code == missing.status_code and got.status_code >= 400
    assert got.content.replace(asked.encode(), b"<asked>") == missing.content.replace(made_up.encode(), b"<asked>")


def same_as_missing_name(got: httpx.Response, missing: httpx.Response, asked: str, made_up: str) -> None:
    """`same_as_missing` for names, as the messages quote them ('crag:hr')."""
    same_as_missing(got, missing, f"'{asked}'", f"'{made_up}'")


def run_request(question: str, handler_id: str | None = None) -> dict[str, Any]:
    return {"start_event": {"query": question}, **({"handler_id": handler_id} if handler_id else {})}


# --- the world: two collections, their keys, their runs -----------------------------------------


@asynccontextmanager
async def mcp_as(url: str, token: str | None) -> AsyncIterator[Client]:
    """The official MCP client on `url`/mcp over streamable HTTP, sending `token`."""
    http = httpx2.AsyncClient(headers=auth(token), timeout=WAIT)
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
        yield client


async def mcp_ask(url: str, token: str, question: str, collection: str) -> dict[str, Any]:
    async with mcp_as(url, token) as client:
        result = await client.call_tool("ask", {"question": question, "collection": collection})
    assert not result.is_error, result.content
    return result.structured_content


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("leaks")
    root = secret_collections(tmp / "index")
    settings = server_settings(root, store=str(tmp / "server.db"), api_key=ADMIN_KEY)
    sides = {
        "default": Side("default", "crag", key_for(settings, "team", ["default"]), DEFAULT_QUESTION,
                        [DEFAULT_SECRET], [DEFAULT_FILE, *(p.name for p in (SAMPLES / "docs").iterdir())]),
        "hr": Side("hr", "crag:hr", key_for(settings, "hr-bot", ["hr"]), HR_QUESTION, [HR_SECRET], [HR_FILE]),
    }
    tokens = {
        "ingest-only": key_for(settings, "hr-ingest", ["hr"], ["ingest"]),  # may add to hr, not ask it
        "ghost": key_for(settings, "ghost", [MADE_UP]),  # a key for a collection that does not exist
        "revoked-events": key_for(settings, "revoked-events", ["hr"]),
        "revoked-openai": key_for(settings, "revoked-openai", ["hr"]),
    }
    crag_server = build_server(settings)
    with uvicorn_serving(crag_server.app) as url, httpx.Client(base_url=url, timeout=WAIT) as http:
        world = World(url, root, settings, crag_server, http, sides, tokens)
        sizes = world.get("/health", ADMIN_KEY).json()["collections"]
        for side in sides.values():
            side.sizes.append((sizes[side.collection]["chunks"], sizes[side.collection]["files"]))
            asked = world.post(f"/workflows/{side.model}/run", side.token, json=run_request(side.question))
            assert asked.status_code == 200 and side.secrets[0] in asked.text  # its own key reaches it
            record = asked.json()
            side.runs["run-route"] = record["handler_id"]
            side.file_ids += [s["file_id"] for s in record["result"]["value"]["result"]["sources"] if s.get("file_id")]
            chat = world.openai(side.token).chat.completions.create(
                model=side.model, messages=[{"role": "user", "content": side.question}])
            side.runs["openai"] = chat.model_extra["crag"]["handler_id"]
            side.runs["mcp"] = asyncio.run(mcp_ask(url, side.token, side.question, side.collection))["run_id"]
        for side in sides.values():  # each run, recorded: its run id too
            for handler_id in side.runs.values():
                side.run_ids.append(world.get(f"/handlers/{handler_id}", ADMIN_KEY).json()["run_id"])
        assert all(side.file_ids for side in sides.values())
        yield world


PAIRS = [("hr", "default"), ("default", "hr")]  # (the asking key's collection, the other's)
PAIR_IDS = ["hr-key", "team-key"]


@pytest.fixture(params=PAIRS, ids=PAIR_IDS)
def pair(request: pytest.FixtureRequest, world: World) -> tuple[Side, Side]:
    """(the asking side, the other side), for an attempt made both ways."""
    asking, other = request.param
    return world.sides[asking], world.sides[other]


# --- run ids: guessed and replayed ----------------------------------------------------------------

RUN_READS = ["/handlers/{id}", "/handlers/{id}/", "/handlers/{id}/trace", "/handlers/{id}/explanation",
             "/results/{id}", "/events/{id}", "/events/{id}?sse=true"]
DOORS = ["run-route", "openai", "mcp"]


@pytest.mark.parametrize("door", DOORS, ids=[f"{d}-run" for d in DOORS])
@pytest.mark.parametrize("route", RUN_READS)
def test_another_collections_run_reads_as_a_missing_run(world: World, pair: tuple[Side, Side],
                                                        route: str, door: str) -> None:
    asking, other = pair
    theirs = other.runs[door]
    got = world.get(route.format(id=theirs), asking.token)
    missing = world.get(route.format(id=MISSING_RUN), asking.token)
    shows_nothing_of(got.content, other, theirs)
    same_as_missing(got, missing, theirs, MISSING_RUN)
    if not route.endswith("/"):  # which the server's own routes do not take, for anyone
        # its own key reads it (the server's /events of a finished run is a 204 that resets the
        # connection, llama-agents-server's: on a connection of its own)
        own = world.get(route.format(id=theirs), other.token, headers={"Connection": "close"})
        assert own.status_code in (200, 204)


def test_cancelling_another_collections_run_is_a_missing_run(world: World, pair: tuple[Side, Side]) -> None:
    asking, other = pair
    theirs = other.runs["run-route"]
    got = world.post(f"/handlers/{theirs}/cancel", asking.token)
    missing = world.post(f"/handlers/{MISSING_RUN}/cancel", asking.token)
    shows_nothing_of(got.content, other, theirs)
    same_as_missing(got, missing, theirs, MISSING_RUN)
    assert world.get(f"/handlers/{theirs}", other.token).json()["status"] == "completed"


@pytest.mark.parametrize("route", ["run", "run-nowait"])
def test_a_replayed_handler_id_of_another_collection_starts_nothing_and_says_nothing(
    world: World, pair: tuple[Side, Side], route: str
) -> None:
    """A handler id names one run, whoever holds it (409); the refusal reads the same for an id
    of the asker's own collection, so it tells nothing of the other's run."""
    asking, other = pair
    theirs, ours = other.runs["run-route"], asking.runs["run-route"]
    path = f"/workflows/{asking.model}/{route}"
    got = world.post(path, asking.token, json=run_request(asking.question, theirs))
    own = world.post(path, asking.token, json=run_request(asking.question, ours))
    shows_nothing_of(got.content, other, theirs)
    assert got.status_code == 409
    same_as_missing(got, own, theirs, ours)
    record = world.get(f"/handlers/{theirs}", other.token).json()
    assert record["workflow_name"] == other.model and other.secrets[0] in json.dumps(record)


# --- files taken from another collection's citations ------------------------------------------------

RANGES = {"whole": None, "range": "bytes=0-20", "suffix-range": "bytes=-12", "past-the-end": "bytes=99999-"}


@pytest.mark.parametrize("asked_range", list(RANGES.values()), ids=list(RANGES))
def test_another_collections_cited_file_is_a_missing_file(world: World, pair: tuple[Side, Side],
                                                          asked_range: str | None) -> None:
    asking, other = pair
    headers = {"Range": asked_range} if asked_range else {}
    for theirs in other.file_ids:
        got = world.get(f"/files/{theirs}", asking.token, headers=headers)
        missing = world.get(f"/files/{MISSING_FILE}", asking.token, headers=headers)
        shows_nothing_of(got.content, other, theirs)
        same_as_missing(got, missing, theirs, MISSING_FILE)


@pytest.mark.parametrize("collection", ["default", "hr"])
def test_each_key_opens_its_own_collections_cited_files(world: World, collection: str) -> None:
    """The control of the attempt above: a citation's file opens for its own key."""
    side = world.sides[collection]
    opened = world.get(f"/files/{side.file_ids[0]}", side.token)
    assert opened.status_code == 200 and side.secrets[0] in opened.text


# --- /handlers and its filters -----------------------------------------------------------------------

FILTERS = {
    "no-filter": {},
    "workflow_name=other": {"workflow_name": "{other}"},
    "workflow_name=other,own": {"workflow_name": ["{other}", "{own}"]},
    "status=completed": {"status": "completed"},
    "every-status": {"status": ["running", "completed", "failed", "cancelled"]},
    "limit=1000": {"limit": "1000"},
}


@pytest.mark.parametrize("query", list(FILTERS.values()), ids=list(FILTERS))
def test_handlers_lists_only_the_keys_own_runs(world: World, pair: tuple[Side, Side], query: dict) -> None:
    asking, other = pair
    params = {name: [v.format(other=other.model, own=asking.model) for v in ([value] if isinstance(value, str) else value)]
              for name, value in query.items()}
    got = world.get("/handlers", asking.token, params=params)
    assert got.status_code == 200
    shows_nothing_of(got.content, other)
    listed = got.json()["handlers"]
    assert {h["workflow_name"] for h in listed} <= {asking.model}
    if params.get("workflow_name") == [other.model]:
        assert listed == [] and got.json() == world.get(
            "/handlers", asking.token, params={"workflow_name": f"crag:{MADE_UP}"}).json()
    else:
        assert set(asking.runs.values()) <= {h["handler_id"] for h in listed}


def test_handlers_before_another_collections_run_is_a_missing_run(world: World, pair: tuple[Side, Side]) -> None:
    asking, other = pair
    theirs = other.runs["run-route"]
    got = world.get("/handlers", asking.token, params={"before": theirs})
    missing = world.get("/handlers", asking.token, params={"before": MISSING_RUN})
    shows_nothing_of(got.content, other, theirs)
    same_as_missing(got, missing, theirs, MISSING_RUN)


def test_handlers_paged_one_by_one_never_reaches_another_collection(world: World, pair: tuple[Side, Side]) -> None:
    asking, other = pair
    seen: list[str] = []
    before: str | None = None
    for _ in range(100):
        page = world.get("/handlers", asking.token, params={"limit": "1", **({"before": before} if before else {})})
        shows_nothing_of(page.content, other)
        seen += [h["handler_id"] for h in page.json()["handlers"]]
        before = page.json()["next_before"]
        if before is None:
            break
    assert set(asking.runs.values()) <= set(seen) and not set(seen) & set(other.runs.values())


# --- /workflows ----------------------------------------------------------------------------------------


def test_workflows_lists_only_the_keys_own(world: World, pair: tuple[Side, Side]) -> None:
    asking, other = pair
    got = world.get("/workflows", asking.token)
    assert got.json() == {"workflows": [asking.model]}
    shows_nothing_of(got.content, other)


@pytest.mark.parametrize("route", ["schema", "representation", "events", "run", "run-nowait"])
def test_another_collections_workflow_is_a_missing_workflow(world: World, pair: tuple[Side, Side], route: str) -> None:
    asking, other = pair
    call = world.post if route.startswith("run") else world.get
    body = {"json": run_request(other.question)} if route.startswith("run") else {}
    got = call(f"/workflows/{other.model}/{route}", asking.token, **body)
    missing = call(f"/workflows/crag:{MADE_UP}/{route}", asking.token, **body)
    shows_nothing_of(got.content, other)
    same_as_missing_name(got, missing, other.model, f"crag:{MADE_UP}")
    assert got.status_code == 404


# --- names: upper case, percent-encoded, trailing slash, dots --------------------------------------------

# The other collection's model id, written otherwise; each with a made-up name of the same shape.
NAMES = {
    "hr": [("crag%3Ahr", "crag%3Apayroll"), ("CRAG:HR", "CRAG:PAYROLL"), ("crag:HR", "crag:PAYROLL"),
           ("Crag:hr", "Crag:payroll"), ("crag:hr/", "crag:payroll/"), ("crag:..", "crag:payroll"),
           (" crag:hr", " crag:payroll")],
    "default": [("crag%3Adefault", "crag%3Apayroll"), ("CRAG", "CRAG:PAYROLL"), ("crag:default", "crag:payroll"),
                ("Crag", "Crag:payroll"), ("crag/", "crag:payroll/"), ("crag:..", "crag:payroll"),
                (" crag", " crag:payroll")],
}
NAME_CASES = [(asking, other, name, made_up) for asking, other in PAIRS for name, made_up in NAMES[other]]
NAME_IDS = [f"{PAIR_IDS[PAIRS.index((a, o))]}-{n.strip() or n}" for a, o, n, _ in NAME_CASES]


@pytest.mark.parametrize(("asking", "other", "name", "made_up"), NAME_CASES, ids=NAME_IDS)
@pytest.mark.parametrize("door", ["run-nowait-path", "v1-models-path", "openai-model-field"])
def test_another_collections_name_written_otherwise_is_a_missing_name(
    world: World, asking: str, other: str, name: str, made_up: str, door: str
) -> None:
    me, them = world.sides[asking], world.sides[other]

    def tried(model: str) -> httpx.Response:
        if door == "run-nowait-path":
            return world.post(f"/workflows/{model}/run-nowait", me.token, json=run_request(them.question))
        if door == "v1-models-path":
            return world.get(f"/v1/models/{model}", me.token)
        with pytest.raises(openai.APIStatusError) as refused:
            world.openai(me.token).chat.completions.create(
                model=model, messages=[{"role": "user", "content": them.question}])
        return refused.value.response

    got, missing = tried(name), tried(made_up)
    shows_nothing_of(got.content, them)
    same_as_missing_name(got, missing, name if door == "openai-model-field" else unquote(name),
                         made_up if door == "openai-model-field" else unquote(made_up))


# --- the OpenAI door ----------------------------------------------------------------------------------------

OPENAI_CALLS = ["chat", "chat-stream", "legacy", "legacy-stream", "retrieve-model"]


def _openai_call(client: openai.OpenAI, call: str, model: str, question: str) -> Any:
    if call.startswith("chat"):
        return client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                              stream=call.endswith("stream"))
    if call.startswith("legacy"):
        return client.completions.create(model=model, prompt=question, stream=call.endswith("stream"))
    return client.models.retrieve(model)


@pytest.mark.parametrize("call", OPENAI_CALLS)
def test_another_collections_model_is_a_missing_model(world: World, pair: tuple[Side, Side], call: str) -> None:
    asking, other = pair
    client = world.openai(asking.token)
    with pytest.raises(openai.NotFoundError) as got:
        _openai_call(client, call, other.model, other.question)
    with pytest.raises(openai.NotFoundError) as missing:
        _openai_call(client, call, f"crag:{MADE_UP}", other.question)
    shows_nothing_of(got.value.response.content, other)
    same_as_missing_name(got.value.response, missing.value.response, other.model, f"crag:{MADE_UP}")


def test_openai_models_lists_only_the_keys_own(world: World, pair: tuple[Side, Side]) -> None:
    asking, other = pair
    listed = world.openai(asking.token).models.list()
    assert [m.id for m in listed.data] == [asking.model]
    shows_nothing_of(world.get("/v1/models", asking.token).content, other)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_keys_own_model_asked_the_others_question_answers_from_its_own(
    world: World, pair: tuple[Side, Side], stream: bool
) -> None:
    asking, other = pair
    reply = world.openai(asking.token).chat.completions.create(
        model=asking.model, messages=[{"role": "user", "content": other.question}], stream=stream)
    text = "".join(c.model_dump_json() for c in reply) if stream else reply.model_dump_json()
    shows_nothing_of(text, other)


# --- MCP: across doors, and names written otherwise ------------------------------------------------------


async def _mcp_refusal(url: str, token: str, tool: str, arguments: dict) -> str:
    async with mcp_as(url, token) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error and result.structured_content is None
    return result.content[0].text


@pytest.mark.parametrize("door", ["run-route", "openai"], ids=["run-route-run", "openai-run"])
async def test_mcp_trace_of_another_collections_http_run_is_a_missing_run(
    world: World, pair: tuple[Side, Side], door: str
) -> None:
    asking, other = pair
    theirs = other.runs[door]
    async with mcp_as(world.url, asking.token) as client:
        errors = []
        for run in (theirs, MISSING_RUN):
            with pytest.raises(MCPError) as caught:
                await client.read_resource(f"crag://runs/{run}/trace")
            errors.append(str(caught.value))
    shows_nothing_of(errors[0], other, theirs)
    assert errors[0].replace(theirs, MISSING_RUN) == errors[1]


async def test_mcp_ask_of_the_keys_own_collection_with_the_others_question(world: World, pair: tuple[Side, Side]) -> None:
    asking, other = pair
    answered = await mcp_ask(world.url, asking.token, other.question, asking.collection)
    assert answered["collection"] == asking.collection
    shows_nothing_of(json.dumps(answered), other)


MCP_NAMES = {"hr": [("HR", "PAYROLL"), ("Hr", "Payroll"), ("hr/", "payroll/"), ("crag:hr", "crag:payroll"),
                    (" hr", " payroll"), ("..", "payroll")],
             "default": [("DEFAULT", "PAYROLL"), ("crag", "crag:payroll"), ("default/", "payroll/"), ("", "payroll"),
                         ("..", "payroll")]}
MCP_CASES = [(asking, other, name, made_up) for asking, other in PAIRS for name, made_up in MCP_NAMES[other]]


@pytest.mark.parametrize(("asking", "other", "name", "made_up"), MCP_CASES,
                         ids=[f"{PAIR_IDS[PAIRS.index((a, o))]}-{n.strip() or repr(n)}" for a, o, n, _ in MCP_CASES])
async def test_mcp_search_of_another_collections_name_written_otherwise(
    world: World, asking: str, other: str, name: str, made_up: str
) -> None:
    me, them = world.sides[asking], world.sides[other]
    said = await _mcp_refusal(world.url, me.token, "search", {"question": them.question, "collection": name})
    missing = await _mcp_refusal(world.url, me.token, "search", {"question": them.question, "collection": made_up})
    shows_nothing_of(said, them)
    assert said.replace(repr(name), "<asked>") == missing.replace(repr(made_up), "<asked>")


# --- keys that reach nothing: the ingest right without ask, a collection that does not exist ---------------


@pytest.mark.parametrize("key", ["ingest-only", "ghost"])
@pytest.mark.parametrize("attempt", ["/health", "/workflows", "/v1/models", "/handlers", "run-hr", "run-default",
                                     "read-hr-run", "openai-hr", "mcp-ask-hr", "mcp-collections"])
async def test_a_key_that_may_ask_nothing_sees_nothing(world: World, key: str, attempt: str) -> None:
    token = world.tokens[key]
    hr, default = world.sides["hr"], world.sides["default"]

    def http() -> bytes:
        if attempt.startswith("/"):
            got = world.get(attempt, token)
            assert got.status_code == 200
            assert got.json().get("workflows", []) == [] and got.json().get("data", []) == []
            assert got.json().get("handlers", []) == [] and not got.json().get("collections")
            return got.content
        if attempt.startswith("run-"):
            side = world.sides[attempt.removeprefix("run-")]
            got = world.post(f"/workflows/{side.model}/run", token, json=run_request(side.question))
        elif attempt == "read-hr-run":
            got = world.get(f"/handlers/{hr.runs['run-route']}", token)
        else:
            with pytest.raises(openai.NotFoundError) as refused:
                world.openai(token).chat.completions.create(
                    model=hr.model, messages=[{"role": "user", "content": hr.question}])
            got = refused.value.response
        assert got.status_code == 404
        return got.content

    if attempt.startswith("mcp"):
        if attempt == "mcp-collections":
            async with mcp_as(world.url, token) as client:
                listed = await client.call_tool("collections", {})
            assert listed.structured_content == {"collections": []}
            body = json.dumps(listed.structured_content)
        else:
            body = await _mcp_refusal(world.url, token, "ask", {"question": HR_QUESTION, "collection": "hr"})
    else:
        body = await asyncio.to_thread(http)
    shows_nothing_of(body, hr)
    shows_nothing_of(body, default)


# --- /health, by who asks -------------------------------------------------------------------------------------

HEALTH = {  # who asks -> the collections it is told of
    "no-key": (None, []), "wrong-key": ("crag_0123456789ab_" + "A" * 43, []),
    "team-key": ("default", ["default"]), "hr-key": ("hr", ["hr"]),
    "ingest-only-key": ("ingest-only", []), "ghost-key": ("ghost", []), "legacy-admin-key": ("admin", ["default", "hr"]),
}


@pytest.mark.parametrize(("who", "told"), list(HEALTH.values()), ids=list(HEALTH))
def test_health_tells_each_key_of_its_own_collections_only(world: World, who: str | None, told: list[str]) -> None:
    token = (world.sides[who].token if who in world.sides else ADMIN_KEY if who == "admin"
             else world.tokens.get(who, who) if who else None)
    got = world.get("/health", token)
    assert got.status_code == 200
    body = got.json()
    assert sorted(body["collections"]) == told
    assert body["workflows"] == [world.sides[c].model for c in told]
    for name, side in world.sides.items():
        if name not in told:
            shows_nothing_of(got.content, side)
        else:
            assert (body["collections"][name]["chunks"], body["collections"][name]["files"]) in side.sizes


# --- the legacy single key is admin: it sees both -------------------------------------------------------------


@pytest.mark.parametrize("route", ["/handlers", "/workflows", "/v1/models", "runs"])
def test_the_legacy_admin_key_sees_both_collections(world: World, route: str) -> None:
    if route == "runs":
        for side in world.sides.values():
            for handler_id in side.runs.values():
                read = world.get(f"/handlers/{handler_id}", ADMIN_KEY)
                assert read.status_code == 200 and side.secrets[0] in read.text
        return
    body = world.get(route, ADMIN_KEY).text
    for side in world.sides.values():
        assert side.model in body


# --- a key revoked mid-stream -----------------------------------------------------------------------------------


@pytest.fixture
def gated_hr(world: World) -> Iterator[GatedGrader]:
    """hr's runs held in their grading step until the gate opens (the served workflow swapped, as
    a reload swaps it), so that a stream of one is open while its key is revoked."""
    from crag.workflows.factory import build_workflow

    runs = world.server.runs
    served = runs.collections["hr"]
    grader = GatedGrader()
    own = world.settings.for_collection("hr")
    runs.serve(build_workflow(own, index=served.index, grader=grader), served.index, "hr")
    try:
        yield grader
    finally:
        grader.gate.set()
        runs.serve(served.workflow, served.index, "hr")


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.02)


def _revoke_and_wait(world: World, name: str) -> None:
    """Revoke the key `name`, then wait until the server refuses it (its ring re-read)."""
    revoke_key(keys_file(world.settings), name)
    _until(lambda: world.get("/workflows", world.tokens[name]).status_code == 401, "the key to be refused")


def test_a_key_revoked_while_it_reads_a_runs_events_gets_nothing_further(world: World, gated_hr: GatedGrader) -> None:
    token = world.tokens["revoked-events"]
    started = world.post("/workflows/crag:hr/run-nowait", token, json=run_request(HR_QUESTION))
    assert started.status_code == 200
    handler_id = started.json()["handler_id"]
    with world.http.stream("GET", f"/events/{handler_id}", headers=auth(token)) as events:
        assert events.status_code == 200
        lines = events.iter_lines()
        first = next(lines)
        _until(lambda: gated_hr.inside > 0, "the run to reach its grading")
        _revoke_and_wait(world, "revoked-events")
        gated_hr.gate.set()
        rest = list(lines)
    assert HR_SECRET not in first + "".join(rest)
    assert not any("StopEvent" in line for line in rest)
    _until(lambda: world.get(f"/handlers/{handler_id}", ADMIN_KEY).json()["status"] != "running", "the run to end")
    assert HR_SECRET in world.get(f"/handlers/{handler_id}", ADMIN_KEY).text  # what the stream would have sent
    assert world.get(f"/handlers/{handler_id}", token).status_code == 401


def test_a_key_revoked_while_it_reads_an_openai_stream_gets_nothing_further(
    world: World, gated_hr: GatedGrader
) -> None:
    token = world.tokens["revoked-openai"]
    stream = world.openai(token).chat.completions.create(
        model="crag:hr", messages=[{"role": "user", "content": HR_QUESTION}], stream=True)
    chunks = iter(stream)
    first = next(chunks)
    assert first.choices[0].delta.role == "assistant"
    _until(lambda: gated_hr.inside > 0, "the run to reach its grading")
    _revoke_and_wait(world, "revoked-openai")
    gated_hr.gate.set()
    try:
        rest = [c.model_dump_json() for c in chunks]
    except openai.APIError:  # the stream cut short: said by the client, with nothing of the answer
        rest = []
    assert HR_SECRET not in "".join(rest) and not rest
    with pytest.raises(openai.AuthenticationError):
        world.openai(token).models.list()


def test_another_key_cannot_cancel_or_watch_a_running_run(world: World, gated_hr: GatedGrader) -> None:
    """A run of hr that is running now: the team key's cancel and event stream are those of a
    missing run, and the run goes on to its answer."""
    hr, team = world.sides["hr"], world.sides["default"]
    started = world.post("/workflows/crag:hr/run-nowait", hr.token, json=run_request(HR_QUESTION))
    handler_id = started.json()["handler_id"]
    _until(lambda: gated_hr.inside > 0, "the run to reach its grading")
    for method, route in (("POST", "/handlers/{}/cancel"), ("GET", "/events/{}"), ("GET", "/handlers/{}")):
        got = world.http.request(method, route.format(handler_id), headers=auth(team.token))
        missing = world.http.request(method, route.format(MISSING_RUN), headers=auth(team.token))
        same_as_missing(got, missing, handler_id, MISSING_RUN)
    gated_hr.gate.set()
    _until(lambda: world.get(f"/handlers/{handler_id}", hr.token).json()["status"] != "running", "the run to end")
    assert world.get(f"/handlers/{handler_id}", hr.token).json()["status"] == "completed"


# --- cache rows: a grade kept for one collection's chunk is not another's ---------------------------------------

SHARED_FILE = "canteen.md"  # in both collections, word for word: one chunk text, two collections
SHARED_TEXT = "The canteen of the Lumen offices opens at 07:30 and closes at 15:00 on weekdays."
SHARED_QUESTION = "When does the canteen of the Lumen offices open?"


def _grading(prompt: str) -> bool:
    return "Rate how relevant the document is" in prompt


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def cache_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The same question asked of the default collection, then of hr (each holding the shared
    chunk beside its secret), then of the default again, on a server whose grades a model gives
    (a loopback one) and a cache keeps: grades.sqlite in each index, or the one PostgreSQL table
    every collection shares. Each run's result, and the grading prompts that held the shared text."""
    tmp = tmp_path_factory.mktemp(f"cache-{request.param}")
    root = tmp / "index"
    for name, file, secret in (("default", DEFAULT_FILE, DEFAULT_SECRET), ("hr", HR_FILE, HR_SECRET)):
        docs = tmp / "docs" / name
        docs.mkdir(parents=True)
        (docs / SHARED_FILE).write_text(f"# Canteen\n\n{SHARED_TEXT}\n")
        (docs / file).write_text(f"# Secret\n\nThe codeword of the {name} collection is {secret}.\n")
        ingest([docs], collection_path(root, name))
    with ExitStack() as stack:
        store = str(tmp / "server.db") if request.param == "sqlite" else stack.enter_context(postgres_url())
        model = stack.enter_context(LoopbackServer(openai_chat(lambda p: "9" if _grading(p) else "At 07:30 [1].")))
        settings = Settings.load(env={"OPENAI_BASE_URL": model.url + "/v1", "OPENAI_API_KEY": "sk-test"},
                                 index={"path": root}, web_search={"corpus": SAMPLES / "web.jsonl"},
                                 server={"store": store})
        url = stack.enter_context(uvicorn_serving(build_server(settings).app))
        shared = lambda: sum(_grading(t) and "07:30" in t
                             for t in map(message_text, model.requests_to("/chat/completions")))
        seen: dict[str, Any] = {}
        for step, workflow in (("default", "crag"), ("hr", "crag:hr"), ("default-again", "crag")):
            asked = httpx.post(f"{url}/workflows/{workflow}/run", json=run_request(SHARED_QUESTION), timeout=WAIT)
            assert asked.status_code == 200, asked.text
            seen[step] = (asked.json()["result"]["value"]["result"], shared())
        yield seen


def test_a_grade_kept_for_one_collections_chunk_is_not_reused_by_another(cache_runs: dict[str, Any]) -> None:
    """The same question and the same chunk text in two collections: hr's run grades the chunk
    itself (the model is asked again, nothing is read from the default's grades), and the
    default's asked again is answered from its own cache, so the cache is on."""
    (default, graded_default), (hr, graded_hr), (again, graded_again) = (
        cache_runs["default"], cache_runs["hr"], cache_runs["default-again"])
    assert graded_default >= 1 and not any(g["cached"] for g in default["grades"])
    assert graded_hr > graded_default, "hr's chunk was graded from the default collection's cache"
    assert not any(g["cached"] for g in hr["grades"]) and hr["cost"]["cache_hits"] == 0
    assert DEFAULT_SECRET not in json.dumps(hr) and DEFAULT_FILE not in json.dumps(hr)
    assert graded_again == graded_hr and again["grades"] and all(g["cached"] for g in again["grades"])


# --- reload: a new version of one collection, while the other's key watches ------------------------------------

WATCHED = ["/health", "/workflows", "/v1/models", "/handlers"]
NEW = {"default": ("HERON-3306", "vault-2.md"), "hr": ("PUFFIN-7719", "salaries-2.md")}


@pytest.fixture(scope="module")
def reloaded(world: World, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, dict]]:
    """Each collection given a new version (ingested while the server runs, which reloads it);
    what the other key's watched routes answered before and after, by the collection reloaded."""
    seen: dict[str, tuple[dict, dict]] = {}
    for name, watcher in (("default", "hr"), ("hr", "default")):
        side, token = world.sides[name], world.sides[watcher].token
        before = {route: world.get(route, token).content for route in WATCHED}
        secret, file = NEW[name]
        docs = tmp_path_factory.mktemp(f"new-{name}")
        (docs / file).write_text(f"# New\n\nThe new codeword of the {name} collection is {secret}.\n")
        ingest([docs], collection_path(world.root, name))
        side.secrets.append(secret)
        side.files.append(file)
        _until(lambda side=side: _size(world, side) not in side.sizes, f"{name} to reload")
        side.sizes.append(_size(world, side))
        assert secret in world.post(f"/workflows/{side.model}/run", side.token,
                                    json=run_request(f"What is the new codeword of the {name} collection?")).text
        after = {route: world.get(route, token).content for route in WATCHED}
        seen[name] = (before, after)
    return seen


def _size(world: World, side: Side) -> tuple[int, int]:
    told = world.get("/health", side.token).json()["collections"][side.collection]
    return told["chunks"], told["files"]


@pytest.mark.parametrize("route", WATCHED)
@pytest.mark.parametrize("reloaded_one", ["default", "hr"], ids=["hr-key-watching-default", "team-key-watching-hr"])
def test_a_reload_of_another_collection_changes_nothing_for_this_key(
    world: World, reloaded: dict[str, tuple[dict, dict]], reloaded_one: str, route: str
) -> None:
    before, after = reloaded[reloaded_one]
    assert after[route] == before[route]
    shows_nothing_of(after[route], world.sides[reloaded_one])

