"""One `crag serve` for three collections under load, through real clients (httpx on the run
route, the official `openai` client whole and streamed): thirty runs at once with three keys,
each answer citing only its own collection, while one collection is ingested anew and reloaded;
the reloaded one then answers from its new version, and the two others are untouched (the same
served workflow, the same answers, the same sizes)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from support.loopback import uvicorn_serving
from support.paths import SAMPLES
from support.three_collections import (
    DOCUMENTS,
    FILES,
    MARKERS,
    NAMES,
    ONCALL,
    UPDATE,
    UPDATE_MARKER,
    add_document,
    three_collections,
)

from crag import Settings
from crag.app.keys import create_key, keys_file
from crag.app.server import CragServer, build_server

ADMIN_KEY = "admin-key-of-the-load-test"
RUNS_PER_KEY = 10
WAIT_CAP = 180.0  # seconds: a guard against a hang, never a measure of speed
RELOADED = "hr"
MAX_ROUNDS = 50  # runs per asker before giving up on the reload (then the wait fails)


@dataclass(frozen=True)
class Answer:
    """What a door said: the answer's text and the files its internal sources name."""

    collection: str
    text: str
    files: frozenset[str]


@dataclass(frozen=True)
class Served:
    url: str
    server: CragServer
    root: Path
    tokens: dict[str, str]  # a ring key per collection, that asks it alone


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("three-collections")
    root = three_collections(tmp / "index")
    # Room for every run at once: admission is not what this test is about (test_admission.py).
    settings = Settings.load(env={}, index={"path": root}, web_search={"corpus": SAMPLES / "web.jsonl"},
                             server={"store": str(tmp / "server.db"), "api_key": ADMIN_KEY,
                                     "max_runs": 3 * RUNS_PER_KEY, "max_queue": 3 * RUNS_PER_KEY})
    tokens = {name: create_key(keys_file(settings), f"{name}-bot", [name])[1] for name in NAMES}
    crag_server = build_server(settings)
    with uvicorn_serving(crag_server.app) as url:
        yield Served(url, crag_server, root, tokens)


def _answer(collection: str, text: str, sources: list[dict[str, Any]]) -> Answer:
    return Answer(collection, text, frozenset(s.get("file") for s in sources if s["kind"] == "internal"))


async def _run_route(http: httpx.AsyncClient, served: Served, collection: str, question: str) -> Answer:
    reply = await http.post(f"{served.url}/workflows/crag:{collection}/run", json={"start_event": {"query": question}},
                            headers={"Authorization": f"Bearer {served.tokens[collection]}"})
    assert reply.status_code == 200, reply.text
    result = reply.json()["result"]["value"]["result"]
    return _answer(collection, result["answer"], result["sources"])


async def _openai(served: Served, collection: str, question: str, *, stream: bool) -> Answer:
    client = AsyncOpenAI(base_url=f"{served.url}/v1", api_key=served.tokens[collection], max_retries=0, timeout=120)
    async with client:
        messages = [{"role": "user", "content": question}]
        if not stream:
            reply = await client.chat.completions.create(model=f"crag:{collection}", messages=messages)
            crag = reply.model_extra["crag"]
            return _answer(collection, reply.choices[0].message.content or "", crag["sources"])
        text, crag = "", None
        async for chunk in await client.chat.completions.create(model=f"crag:{collection}", messages=messages,
                                                                stream=True):
            text += "".join(choice.delta.content or "" for choice in chunk.choices)
            crag = (chunk.model_extra or {}).get("crag") or crag
        assert crag is not None, text
        return _answer(collection, text, crag["sources"])


async def _ask(http: httpx.AsyncClient, served: Served, collection: str, question: str, door: int) -> Answer:
    """`question` to `collection` with its key, through one of the three doors."""
    if door == 0:
        return await _run_route(http, served, collection, question)
    return await _openai(served, collection, question, stream=door == 2)


def _assert_own(answer: Answer, own_files: set[str]) -> None:
    """The answer cites only files of its collection and carries its marker, and no other
    collection's marker shows."""
    assert answer.files and answer.files <= own_files, (answer.collection, answer.files)
    own = [MARKERS[answer.collection], *([UPDATE_MARKER] if UPDATE.name in own_files else [])]
    assert any(marker.lower() in answer.text.lower() for marker in own), (answer.collection, answer.text)
    for other in NAMES:
        if other != answer.collection:
            assert MARKERS[other].lower() not in answer.text.lower(), (answer.collection, answer.text)
    if answer.collection != RELOADED:
        assert UPDATE_MARKER.lower() not in answer.text.lower(), (answer.collection, answer.text)


async def _sizes(http: httpx.AsyncClient, served: Served) -> dict[str, Any]:
    reply = await http.get(f"{served.url}/health", headers={"X-API-Key": ADMIN_KEY})
    assert reply.status_code == 200, reply.text
    return reply.json()["collections"]


async def test_thirty_runs_with_three_keys_each_cite_their_own_while_one_collection_reloads(served: Served) -> None:
    runs = served.server.runs
    others = [name for name in NAMES if name != RELOADED]
    untouched = {name: runs.collections[name] for name in others}
    async with httpx.AsyncClient(timeout=120) as http:
        sizes_before = await _sizes(http, served)
        assert set(sizes_before) == set(NAMES)
        # The same question answered by every collection, from its own document: the baseline.
        before = {name: await _ask(http, served, name, ONCALL, 0) for name in NAMES}
        for name, answer in before.items():
            _assert_own(answer, FILES[name])
            assert MARKERS[name] in answer.text

        reloaded = asyncio.Event()
        in_flight: list[int] = []  # one element per run being asked now
        at_reload: list[int] = []  # how many were in flight when the new version was seen served

        async def asker(collection: str, question: str, doors: Iterator[int]) -> list[Answer]:
            """Ask with this collection's key, again and again until the reload is seen served,
            so that the thirty askers are all mid-run when it is."""
            answers: list[Answer] = []
            while not answers or (not reloaded.is_set() and len(answers) < MAX_ROUNDS):
                in_flight.append(1)
                try:
                    answers.append(await _ask(http, served, collection, question, next(doors)))
                finally:
                    in_flight.pop()
            return answers

        async def reload_one() -> None:
            await asyncio.to_thread(add_document, served.root, RELOADED, UPDATE)
            for _ in range(int(WAIT_CAP / 0.1)):  # until the reloader has served the new version
                if (await _sizes(http, served))[RELOADED]["files"] == len(FILES[RELOADED]) + 1:
                    at_reload.append(len(in_flight))
                    reloaded.set()
                    return
                await asyncio.sleep(0.1)
            pytest.fail(f"the new version of {RELOADED!r} was not served within {WAIT_CAP:g} s")

        # Ten askers a key, each with a question of its collection and the three doors in turn
        # (the run route, OpenAI whole, OpenAI streamed), starting at a different one.
        askers = [(name, DOCUMENTS[name][i % 2].question, itertools.cycle([i % 3, (i + 1) % 3, (i + 2) % 3]))
                  for name in NAMES for i in range(RUNS_PER_KEY)]
        *loads, _ = await asyncio.wait_for(
            asyncio.gather(*(asker(*a) for a in askers), reload_one()), WAIT_CAP)

        assert at_reload == [3 * RUNS_PER_KEY]  # every asker was mid-run when the reload was served
        new_files = FILES[RELOADED] | {UPDATE.name}
        for (name, _, _), answers in zip(askers, loads):
            for answer in answers:
                _assert_own(answer, new_files if name == RELOADED else FILES[name])

        # The reloaded collection answers from its new version, through every door ...
        for door in range(3):
            update = await _ask(http, served, RELOADED, UPDATE.question, door)
            _assert_own(update, new_files)
            assert UPDATE_MARKER in update.text and UPDATE.name in update.files
        # ... and the others are as they were: the same workflow served, answers and sizes.
        sizes_after = await _sizes(http, served)
        assert sizes_after[RELOADED]["files"] == sizes_before[RELOADED]["files"] + 1
        for name in others:
            assert runs.collections[name] is untouched[name]
            assert sizes_after[name] == sizes_before[name]
            assert await _ask(http, served, name, ONCALL, 0) == before[name]
