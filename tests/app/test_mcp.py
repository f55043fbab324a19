"""The MCP door, driven by the official `mcp` client: `crag mcp` over stdio in a subprocess, and
`/mcp` inside a real `crag serve` app under uvicorn, behind its API key."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from support.loopback import uvicorn_serving
from support.paths import SAMPLES

import crag
from crag import Settings
from crag.app.cli import main
from crag.app.server import build_server

ANSWERED = "What warranty does Lumen give on the Helio H10?"
KEY = "crag-test-key-0123456789"


def crag_mcp(index: Path, cwd: Path, *flags: str) -> StdioServerParameters:
    """`python -m crag.app.cli mcp --index INDEX`, offline, importing this checkout's crag."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRAG_", "OPENAI_", "TAVILY_"))}
    src = str(Path(crag.__file__).parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    args = ["-m", "crag.app.cli", "mcp", "--index", str(index), *flags]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=cwd)


async def test_over_stdio_ask_answers_with_citations_and_reports_progress(
    sample_index_dir: Path, tmp_path: Path
) -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    params = crag_mcp(sample_index_dir, tmp_path, "--web-corpus", str(SAMPLES / "web.jsonl"))
    async with Client(params) as client:
        assert client.server_info is not None and client.server_info.name == "crag"
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {"ask", "search"} <= set(tools) and "ingest" not in tools  # no writing unless asked
        assert tools["ask"].output_schema is not None and tools["search"].output_schema is not None

        result = await client.call_tool("ask", {"question": ANSWERED}, progress_callback=on_progress)
        assert not result.is_error
        answer = result.structured_content
        assert answer is not None and "12-year" in answer["answer"] and "[1]" in answer["answer"]
        assert answer["verdict"] == "correct"
        assert answer["sources"][0]["number"] == 1 and answer["sources"][0]["citation"] == "warranty.md"
        text = result.content[0].text  # what a client without structured output shows
        assert "12-year" in text and "[1] warranty.md" in text
        messages = [m for _, m in progress]
        assert "grade started" in messages and any(m and m.startswith("synthesize finished") for m in messages)
        assert [d for d, _ in progress] == sorted(d for d, _ in progress)  # progress only grows

        trace = await client.read_resource(f"crag://runs/{answer['run_id']}/trace")
        recorded = json.loads(trace.contents[0].text)
        assert recorded["query"] == ANSWERED and recorded["verdict"] == "correct"

        with pytest.raises(MCPError, match="No run nope here"):
            await client.read_resource("crag://runs/nope/trace")

        found = await client.call_tool("search", {"question": ANSWERED, "top_k": 2})
        hits = found.structured_content["chunks"]
        assert len(hits) == 2 and hits[0]["score"] >= hits[1]["score"]
        assert "12-year" in hits[0]["text"] and hits[0]["source"] == "warranty.md"

        manifest = json.loads((await client.read_resource("crag://index/manifest")).contents[0].text)
        assert manifest["chunks"] == 4 and any(f["name"] == "warranty.md" for f in manifest["files"].values())

        empty = await client.call_tool("ask", {"question": "   "})
        assert empty.is_error and "empty" in empty.content[0].text  # crag's message, not a bug's


async def test_ingest_is_a_tool_only_when_allowed_and_later_questions_see_it(
    own_sample_index_dir: Path, tmp_path: Path
) -> None:
    note = tmp_path / "notes" / "launch.md"
    note.parent.mkdir()
    note.write_text("# Launch\n\nThe Helio H20 launches on 4 March, after the security review.\n")
    async with Client(crag_mcp(own_sample_index_dir, tmp_path, "--allow-ingest")) as client:
        assert "ingest" in {t.name for t in (await client.list_tools()).tools}
        report = await client.call_tool("ingest", {"paths": [str(note.parent)]})
        assert not report.is_error and report.structured_content["chunks_added"] == 1
        manifest = json.loads((await client.read_resource("crag://index/manifest")).contents[0].text)
        assert manifest["chunks"] == 5
        found = await client.call_tool("search", {"question": "When does the Helio H20 launch?", "top_k": 1})
        assert "4 March" in found.structured_content["chunks"][0]["text"]


def test_without_the_sdk_crag_mcp_says_how_to_install_it(
    sample_index_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if not installed: find_spec says None
    assert main(["mcp", "--index", str(sample_index_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'crag-workflows[mcp]'" in err and "Traceback" not in err


def test_crag_mcp_on_a_missing_index_fails_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mcp", "--index", str(tmp_path / "nowhere")]) == 2
    assert "crag ingest" in capsys.readouterr().err


@pytest.fixture(scope="module")
def served(sample_index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `crag serve` app with an API key, under uvicorn on loopback."""
    settings = Settings.load(env={}, index={"path": sample_index_dir},
                             web_search={"corpus": SAMPLES / "web.jsonl"},
                             server={"store": str(tmp_path_factory.mktemp("mcp") / "s.db"), "api_key": KEY})
    with uvicorn_serving(build_server(settings).app) as url:
        yield url


async def test_over_http_mcp_needs_the_api_key(served: str) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "test", "version": "0"}}}
    headers = {"accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient() as http:
        refused = await http.post(f"{served}/mcp", json=hello, headers=headers)
        assert refused.status_code == 401 and KEY not in refused.text
        wrong = await http.post(f"{served}/mcp", json=hello, headers={**headers, "authorization": "Bearer nope"})
        assert wrong.status_code == 401
    with pytest.raises(Exception):  # noqa: B017 - the SDK's client fails too, however it says so
        async with Client(f"{served}/mcp", mode="legacy") as client:
            await client.list_tools()


async def test_over_http_ask_works_with_the_api_key(served: str) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{served}/mcp", http_client=http)) as client:
        assert "ingest" not in {t.name for t in (await client.list_tools()).tools}
        steps: list[str | None] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            steps.append(message)

        result = await client.call_tool("ask", {"question": ANSWERED}, progress_callback=on_progress)
        assert not result.is_error and "12-year" in result.structured_content["answer"]
        assert result.structured_content["sources"]
        assert "retrieve started" in steps  # progress comes through the server's middleware too
        # The run went through the server's one run path: recorded with every other door's runs.
        run_id = result.structured_content["run_id"]
        listed = await http.get(f"{served}/handlers?limit=50")
        assert run_id in {h["handler_id"] for h in listed.json()["handlers"]}
        assert (await http.get(f"{served}/handlers/{run_id}/trace")).status_code == 200
        trace = json.loads((await client.read_resource(f"crag://runs/{run_id}/trace")).contents[0].text)
        assert trace["steps"]
        manifest = json.loads((await client.read_resource("crag://index/manifest")).contents[0].text)
        assert manifest["chunks"] == 4
