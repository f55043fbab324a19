"""The MCP `ingest` tool says why an ingest failed (issue 40): a failure that was not crag's own
`CragError` (a bug) reached the caller as "Error executing tool ingest" and nothing more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from crag.app.mcp_ingest import add_ingest_tool
from crag.errors import IngestError
from crag.ingestion import configured


class Engine:
    """What the tool needs of `crag.app.mcp_engine.Engine`: the settings, and a workflow."""

    settings: Any = None

    async def workflow(self) -> None:
        return None

    def replace(self, workflow: object) -> None:
        raise AssertionError("a failed ingest serves no new index")


@pytest.mark.parametrize(("raised", "said"), [
    (ValueError("Metadata length (616) is longer than chunk size (256)"),
     "internal error: ValueError: Metadata length (616) is longer than chunk size (256)"),
    (IngestError("No .txt, .md files found in docs."), "No .txt, .md files found in docs."),
])
async def test_a_failed_ingest_returns_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: Exception, said: str
) -> None:
    def failing(*args: object) -> None:
        raise raised

    monkeypatch.setattr(configured, "ingest_with_settings", failing)
    server = MCPServer("crag")
    add_ingest_tool(server, Engine())  # type: ignore[arg-type] - the part of Engine it uses
    async with Client(server) as client:
        result = await client.call_tool("ingest", {"paths": [str(tmp_path)]})
    assert result.is_error
    assert said in result.content[0].text
