"""What `crag mcp`'s tools run on: the workflow and index, loaded in a thread, and the traces.

Free of the MCP SDK, so that `crag mcp` can start loading before it imports the SDK: the two
take about as long, and the handshake needs only the SDK.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from threading import Thread
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crag.config import Settings
    from crag.index import ChunkIndex
    from crag.trace import RunTrace
    from crag.workflows import CorrectiveRAGWorkflow

KEEP_TRACES = 100  # runs whose trace stays readable; older ones go, so memory stays bounded


@dataclass
class Loaded:
    """What the tools run on; replaced whole after an ingest."""

    workflow: CorrectiveRAGWorkflow
    index: ChunkIndex


@dataclass
class Engine:
    """The settings, the workflow and index (loaded in a thread, once), and this process's traces."""

    settings: Settings
    _future: Future[Loaded] = field(default_factory=Future)
    traces: OrderedDict[str, RunTrace] = field(default_factory=OrderedDict)

    @classmethod
    def ready(cls, settings: Settings, workflow: CorrectiveRAGWorkflow, index: ChunkIndex) -> Engine:
        """An engine on a workflow already built (`crag serve`'s)."""
        engine = cls(settings)
        engine._future.set_result(Loaded(workflow, index))
        return engine

    def start_loading(self) -> None:
        """Load the index and build the workflow in a thread; `loaded()` waits for it."""

        def load() -> None:
            try:
                self._future.set_result(_load(self.settings))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits it
                self._future.set_exception(exc)

        Thread(target=load, name="crag-mcp-load", daemon=True).start()

    async def loaded(self) -> Loaded:
        return await asyncio.wrap_future(self._future)

    def replace(self, workflow: CorrectiveRAGWorkflow, index: ChunkIndex) -> None:
        """Serve `workflow` from the next call on (after an ingest, or `crag serve`'s reload)."""
        fresh: Future[Loaded] = Future()
        fresh.set_result(Loaded(workflow, index))
        self._future = fresh

    def keep(self, run_id: str, trace: RunTrace) -> None:
        self.traces[run_id] = trace
        while len(self.traces) > KEEP_TRACES:
            self.traces.popitem(last=False)


def _load(settings: Settings) -> Loaded:
    from crag.index import ChunkIndex
    from crag.workflows.factory import build_workflow

    index = ChunkIndex.load(settings.index.path, settings.vector_store)
    return Loaded(build_workflow(settings, index=index), index)

