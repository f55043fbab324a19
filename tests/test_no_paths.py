"""No answer shows where the files live (issue 33.3): every output of a question (crag ask
--json and --trace, the workflow's events, the OpenAI door's `crag` field, MCP `search`, `ask`
and the `crag://index/manifest` resource) is searched for the folder that was ingested. Files
are named by their name and their id (`crag.trace.file_id`, a hash of the path), which
`/files/{id}` serves.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import openai
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from support.loopback import uvicorn_serving
from support.paths import DOCUMENTS, SAMPLES

import crag
from crag import Settings, build_workflow
from crag.app.cli import main
from crag.app.server import build_server

DATA = DOCUMENTS
QUESTION = "At what temperature does the Helio H10 inverter shut down?"
KEY = "crag-test-key-0123456789"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a name found nowhere else: a PDF and a Markdown page in it, ingested."""
    root = tmp_path_factory.mktemp("paths") / "where-the-files-live-7f3a"
    root.mkdir()
    (root / "handbook.pdf").write_bytes((DATA / "good" / "handbook.pdf").read_bytes())
    (root / "notes.md").write_text("# Notes\n\nThe Helio H10 is serviced every two years.\n", encoding="utf-8")
    crag.ingest([root], root.parent / "index")
    return root


@pytest.fixture(scope="module")
def settings(root: Path) -> Settings:
    store = root.parent / "runs.db"
    return Settings.load(env={}, index={"path": root.parent / "index"},
                         web_search={"corpus": SAMPLES / "web.jsonl"},
                         server={"store": str(store), "api_key": KEY})


@pytest.fixture(scope="module")
def served(settings: Settings) -> Iterator[str]:
    with uvicorn_serving(build_server(settings).app) as url:
        yield url


def assert_no_path(text: str, root: Path) -> None:
    for path in {str(root), str(root.resolve()), root.name}:
        assert path not in text


def test_crag_ask_json_and_its_trace_show_no_path(
    capsys: pytest.CaptureFixture[str], root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "run.json"
    index = str(root.parent / "index")
    assert main(["ask", QUESTION, "--index", index, "--json", "--quiet", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    source = json.loads(out)["sources"][0]
    assert (source["file"], source["page"]) == ("handbook.pdf", "12")
    assert source["doc_id"].startswith(source["file_id"])  # the document's id is the file's
    assert_no_path(out, root)
    assert_no_path(trace.read_text(encoding="utf-8"), root)


async def test_no_event_of_a_run_shows_a_path(settings: Settings, root: Path) -> None:
    handler = build_workflow(settings).run(query=QUESTION)
    seen = [event.model_dump_json() async for event in handler.stream_events()]
    result = await handler
    assert len(seen) > 10 and result.sources
    assert_no_path("\n".join(seen), root)
    assert_no_path(result.model_dump_json(), root)


def test_the_openai_door_shows_no_path_and_the_file_is_served_by_its_id(served: str, root: Path) -> None:
    client = openai.OpenAI(base_url=f"{served}/v1", api_key=KEY, max_retries=0, timeout=60)
    reply = client.chat.completions.create(model="crag", messages=[{"role": "user", "content": QUESTION}])
    assert_no_path(reply.model_dump_json(), root)
    source = reply.model_extra["crag"]["sources"][0]
    recorded = httpx.get(f"{served}/handlers/{reply.model_extra['crag']['handler_id']}",
                         headers={"Authorization": f"Bearer {KEY}"})
    assert_no_path(recorded.text, root)
    served_file = httpx.get(f"{served}/files/{source['file_id']}", headers={"Authorization": f"Bearer {KEY}"})
    assert served_file.status_code == 200 and served_file.content == (root / "handbook.pdf").read_bytes()


async def test_mcp_search_ask_and_the_manifest_show_no_path(served: str, root: Path) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{served}/mcp", http_client=http)) as client:
        found = await client.call_tool("search", {"question": QUESTION, "top_k": 3})
        answered = await client.call_tool("ask", {"question": QUESTION})
        manifest = (await client.read_resource("crag://index/manifest")).contents[0].text
    for result in (found, answered):
        assert not result.is_error
        assert_no_path(json.dumps(result.structured_content) + result.content[0].text, root)
    assert_no_path(manifest, root)
    assert {f["name"] for f in json.loads(manifest)["files"].values()} == {"handbook.pdf", "notes.md"}
