"""What `crag mcp`'s tools run on: the workflow and index, loaded in a thread, and the traces.

Free of the MCP SDK, so that `crag mcp` can start loading before it imports the SDK: the two
take about as long, and the handshake needs only the SDK.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from threading import Thread
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crag.config import Settings
    from crag.trace import RunTrace
    from crag.workflows import CorrectiveRAGWorkflow

KEEP_TRACES = 100  # runs whose trace stays readable; older ones go, so memory stays bounded


@dataclass
class Engine:
    """The settings, the workflow (built in a thread, once), and this process's run traces."""

    settings: Settings
    admit: Callable[[], AbstractAsyncContextManager[object]] = (
        nullcontext  # `crag serve`'s admission
    )
    _future: Future[CorrectiveRAGWorkflow] = field(default_factory=Future)
    traces: OrderedDict[str, RunTrace] = field(default_factory=OrderedDict)

    @classmethod
    def ready(
        cls,
        settings: Settings,
        workflow: CorrectiveRAGWorkflow,
        admit: Callable[[], AbstractAsyncContextManager[object]] = nullcontext,
    ) -> Engine:
        """An engine on a workflow already built (`crag serve`'s); each run waits on `admit`."""
        engine = cls(settings, admit)
        engine.replace(workflow)
        return engine

    def start_loading(self, *, settle_heap: bool = False) -> None:
        """Load the index and build the workflow in a thread; `workflow()` waits for it.

        With `settle_heap`, for a process that is the engine's alone (`crag mcp`), what is
        loaded is then frozen out of the garbage collector's passes (`crag.settle_heap`)."""

        from crag import _offload

        def load() -> None:
            try:
                from crag.workflows.factory import build_workflow

                workflow = build_workflow(self.settings)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits it
                _offload.resume_collection()  # were it held for the loading
                self._future.set_exception(exc)
                return
            if settle_heap:  # before the result is set, so the first tool call finds it done
                _offload.settle_heap()
            else:
                _offload.resume_collection()
            self._future.set_result(workflow)

        Thread(target=load, name="crag-mcp-load", daemon=True).start()

    async def workflow(self) -> CorrectiveRAGWorkflow:
        """The workflow, once built. Every tool and resource awaits it before its own work, even
        one that needs no workflow: importing llama-index in two threads at once can fail on
        its circular imports, so nothing else imports while the loading thread does."""
        return await asyncio.wrap_future(self._future)

    def replace(self, workflow: CorrectiveRAGWorkflow) -> None:
        """Serve `workflow` from the next call on (after an ingest, or `crag serve`'s reload)."""
        fresh: Future[CorrectiveRAGWorkflow] = Future()
        fresh.set_result(workflow)
        self._future = fresh

    def keep(self, run_id: str, trace: RunTrace) -> None:
        self.traces[run_id] = trace
        while len(self.traces) > KEEP_TRACES:
            self.traces.popitem(last=False)


def manifest(settings: Settings) -> dict:
    """The live index's manifest as on disk (what a reload or an ingest serves next); blocking."""
    from crag.errors import IndexNotFoundError
    from crag.index.layout import live_version, read_manifest

    path = settings.index.path
    try:
        found = read_manifest(live_version(path) / "manifest.json")
    except ValueError as exc:
        raise IndexNotFoundError.damaged(path, f"is damaged ({exc})") from None
    return {
        "path": str(path),
        "chunks": found.get("chunks"),
        "chunker": found.get("chunker"),
        "files": found["files"],
    }
