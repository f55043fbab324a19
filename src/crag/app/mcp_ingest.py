"""The MCP `ingest` tool: the one that writes, so it exists only with `crag mcp --allow-ingest`."""

from __future__ import annotations

import logging
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from crag.errors import CragError, redact

if TYPE_CHECKING:
    from crag.app.mcp_engine import Engine
    from crag.config import Settings
    from crag.ingestion.pipeline import IngestReport

_log = logging.getLogger(__name__)
EVERY = 0.25  # seconds between progress notifications within a stage: embedding reports often


class IngestOutput(BaseModel):
    """What one ingest did."""

    files_read: int
    files_unchanged: int
    chunks_added: int
    chunks_total: int
    skipped: list[str] = Field(description="Files left out, each with its reason.")
    empty: list[str] = Field(default_factory=list, description="Files with no text, not recorded: read again next time.")
    not_read: list[str] = Field(default_factory=list, description="A line per type of file found that crag does not read.")


def add_ingest_tool(server: MCPServer, engine: Engine) -> None:
    """Register `ingest` on `server`: files into `engine`'s index, then serve the new index."""
    from mcp.server.mcpserver.exceptions import ToolError

    lock = (
        anyio.Lock()
    )  # one ingest at a time from this server (the index's own lock spans processes)

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        )
    )
    async def ingest(paths: list[str], ctx: Context) -> IngestOutput:
        """Add files or folders (paths on the server's machine) to the index; unchanged files
        are skipped, changed ones replace their old chunks. Later questions see them."""
        progress = _Progress(ctx)
        async with lock:
            try:
                await engine.workflow()  # see Engine.workflow
                report, workflow = await anyio.to_thread.run_sync(
                    _ingest_and_reload, engine.settings, [Path(p) for p in paths], progress
                )
            except CragError as exc:
                raise ToolError(redact(str(exc))) from None
            except Exception as exc:  # noqa: BLE001 - said to the caller, logged with where
                # A bug of crag's: the caller reads what it was, not only "Error executing tool
                # ingest" (the SDK's line for anything but a ToolError); the log keeps where.
                _log.error("ingest failed", exc_info=exc)
                raise ToolError(redact(f"internal error: {type(exc).__name__}: {exc}")) from None
        engine.replace(workflow)
        return IngestOutput(
            files_read=report.files_read,
            files_unchanged=report.files_unchanged,
            chunks_added=report.chunks_added,
            chunks_total=report.chunks_total,
            skipped=report.skipped,
            empty=report.empty,
            not_read=report.not_read,
        )


class _Progress:
    """ingest's `progress(stage, done, total)`, called from its worker thread, as MCP progress."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.sent = ctx, 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = perf_counter()
        if done < total and now - self.sent < EVERY:
            return
        self.sent = now
        anyio.from_thread.run(self.ctx.report_progress, done, total, f"{stage} {done}/{total}")


def _ingest_and_reload(settings: Settings, paths: list[Path], progress: _Progress) -> tuple:
    """Ingest as `crag ingest` does (keeping the index's chunker), then load what it wrote."""
    from crag.ingestion.configured import ingest_with_settings
    from crag.workflows.factory import build_workflow

    report: IngestReport = ingest_with_settings(paths, settings, progress)
    return report, build_workflow(settings)
