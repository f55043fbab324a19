"""What `crag mcp`'s tools run on: the settings, and the run service, over a workflow loaded in
a thread.

Free of the MCP SDK, so that `crag mcp` can start loading before it imports the SDK: the two
take about as long, and the handshake needs only the SDK. Every `ask` starts its run through
a `RunService` (crag.app.runs), as every door of `crag serve` does: under `crag serve` its
own (admission, the run store), over stdio one of this process's, keeping its last
`KEEP_TRACES` runs in memory.

Who asks: under `crag serve`, the principal the door left on the HTTP request a call came in
(crag.app.access), read by the tools; with no request to say (over stdio, where the caller is
this machine's user), `Engine.unnamed`: `LOCAL` over stdio, `NOBODY` (who sees nothing) on a
server, so that a call no door vouched for fails closed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from threading import Thread
from typing import TYPE_CHECKING, Any

from crag.app.access import LOCAL, NOBODY, Principal

if TYPE_CHECKING:
    from crag.app.runs import RunService
    from crag.config import Settings
    from crag.workflows import CorrectiveRAGWorkflow

KEEP_TRACES = 100  # runs whose trace stays readable over stdio; older ones go, so memory stays bounded


@dataclass
class Engine:
    """The settings, and the run service (over stdio: made once the workflow is built)."""

    settings: Settings
    _future: Future[CorrectiveRAGWorkflow] = field(default_factory=Future)
    _runs: RunService | None = None
    _owned: bool = False  # the service is this engine's own (stdio): it keeps the run store small
    _started: deque[str] = field(default_factory=deque)
    session_manager: Any = None  # the MCP SDK's, under `crag serve` (server/routes/mcp.py)
    unnamed: Principal = LOCAL  # who asks when no HTTP request says (module docstring)
    collection: str | None = None  # over stdio, the one collection served (`crag mcp --collection`)

    @classmethod
    def ready(cls, settings: Settings, runs: RunService) -> Engine:
        """An engine on `crag serve`'s run service (its workflow follows the server's reloads)."""
        engine = cls(settings, unnamed=NOBODY)
        engine._runs = runs  # `workflow()` reads the service's from then on
        return engine

    def start_loading(self, *, settle_heap: bool = False) -> None:
        """Load the index and build the workflow in a thread; `runs()` waits for it.

        With `settle_heap`, for a process that is the engine's alone (`crag mcp`), what is
        loaded is then frozen out of the garbage collector's passes (`crag.settle_heap`)."""

        from crag import _offload

        def load() -> None:
            try:
                from crag.workflows.factory import build_workflow

                workflow = build_workflow(self.settings)
                import llama_agents.server  # noqa: F401

                import crag.app.runs  # noqa: F401 - the service's imports, here rather than on the loop
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
        """The workflow being served, once built. Every tool and resource awaits it before its
        own work, even one that needs no workflow: importing llama-index in two threads at once
        can fail on its circular imports, so nothing else imports while the loading thread does."""
        if self._runs is not None:
            return self._runs.workflow
        return await asyncio.wrap_future(self._future)

    async def runs(self) -> RunService:
        """The run service, made on first use over stdio (a memory run store, no admission)."""
        workflow = await self.workflow()
        if self._runs is None:
            from llama_agents.server import MemoryWorkflowStore, WorkflowServer
            from workflows.plugins.basic import BasicRuntime

            from crag.app.runs import RunService
            from crag.index.collections import DEFAULT

            store = MemoryWorkflowStore()
            server = WorkflowServer(workflow_store=store, runtime=BasicRuntime())
            runs = RunService(server, store, workflow, None, collection=self.collection or DEFAULT)
            await server.start()
            self._runs, self._owned = runs, True
        return self._runs

    def replace(self, workflow: CorrectiveRAGWorkflow) -> None:
        """Serve `workflow` from the next call on (after `ingest`)."""
        if self._runs is not None:
            self._runs.serve(workflow, None, self._runs.default.collection)
            return
        fresh: Future[CorrectiveRAGWorkflow] = Future()
        fresh.set_result(workflow)
        self._future = fresh

    def admitted(self) -> AbstractAsyncContextManager[Any]:
        """A run place for work that is not a run (`search`), where the service admits runs."""
        if self._runs is None or self._runs.admission is None:
            return nullcontext()
        return self._runs.admitted()

    async def kept(self, handler_id: str) -> None:
        """Note a run this engine started; over stdio, forget the oldest beyond `KEEP_TRACES`."""
        if not self._owned or self._runs is None:
            return  # `crag serve` prunes its store itself
        from llama_agents.server import HandlerQuery

        self._started.append(handler_id)
        doomed = [self._started.popleft() for _ in range(len(self._started) - KEEP_TRACES)]
        if doomed:
            await self._runs.store.delete(HandlerQuery(handler_id_in=doomed))

    def index_path(self, collection: str) -> Path:
        """The index folder of `collection`: over stdio the one served (its settings' own),
        under `crag serve` its folder under the index folder (crag.index.collections)."""
        if self._runs is None or self._owned:
            return self.settings.index.path
        from crag.index.collections import collection_path

        return collection_path(self.settings.index.path, collection)

    @asynccontextmanager
    async def sessions(self) -> AsyncIterator[None]:
        """Under `crag serve`: the MCP SDK's session manager, for the app's lifespan."""
        if self.session_manager is None:
            yield
            return
        async with self.session_manager.run():
            yield


def manifest(path: Path) -> dict:
    """The manifest of the live index at `path` as on disk (what a reload or an ingest serves
    next); blocking."""
    from crag.errors import IndexNotFoundError
    from crag.index.layout import live_version, read_manifest
    from crag.trace import file_id

    try:
        found = read_manifest(live_version(path) / "manifest.json")
    except ValueError as exc:
        raise IndexNotFoundError.damaged(path, f"is damaged ({exc})") from None
    # By the files' ids and names: a resource is a reply, and shows no path (the index's own
    # manifest keeps them, to find the files again).
    files = {file_id(key): {"name": Path(key).name, **entry} for key, entry in found["files"].items()}
    return {"index": path.name, "chunks": found.get("chunks"), "chunker": found.get("chunker"), "files": files}
