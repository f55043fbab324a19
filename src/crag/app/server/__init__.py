"""`crag serve`: the workflow over HTTP. crag's own Starlette app, with llama-agents-server's
`WorkflowServer` mounted inside it for what it does well (the run store, the event stream,
the run records); every run, from any door, starts through one `RunService` (crag.app.runs):

    POST /workflows/crag/run[-nowait]  start a run (routes/runs.py), the server's request shape;
                                       /workflows/crag:NAME/... for the collection NAME
    GET  /events/{handler_id}          its events; GET /handlers/{handler_id} its record (the server's,
                                       behind ops/gate.py: a run of another key's collection is a 404)
    GET  /health                       open to all: whether it can answer; what is served, to a key that sees it
    GET  /handlers/{handler_id}/trace  a finished run's path on the graph, one offline HTML page (routes/pages.py)
    GET  /handlers?limit=N&before=ID   the runs newest first, a page at a time (store/listing.py)
    GET  /files/{file_id}              a document the index lists, for a citation to open (routes/files.py)
    POST /v1/chat/completions          the OpenAI-compatible door (openai/api.py), model "crag" or "crag:NAME";
    POST /v1/completions               the legacy door asks its prompt as a chat (openai/legacy.py)
    GET  /v1/models[/crag]
    /mcp                               the MCP door (routes/mcp.py), streamable HTTP, with crag-workflows[mcp]

This module only assembles the app; the work is in four rooms, one job each:

    routes/   crag's own routes: runs, pages (health, live page, trace, explanation), files, /mcp
    openai/   the OpenAI door: its routes, requests, errors and the legacy completions
    store/    the run store: SQLite beside the index by default, PostgreSQL from a URL; /handlers
Who may see what is decided in one place (crag.app.access, asked through `RunService`): the
outermost middleware makes the request's key a `Principal`, and every route asks with it.

    ops/      operations: the request guard and the keys (middleware), admission (at most
              max_runs in flight), upkeep (health probes, pruning, orphans), index reloads
              without a restart, and the model key checked at startup (preflight.py)
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import uvicorn
from llama_agents.server import WorkflowServer
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send
from workflows.plugins.basic import BasicRuntime

from crag import text
from crag._offload import settle_heap
from crag.app.access import ADMIN
from crag.app.grade_cache import grade_cache_for
from crag.app.keys import KeyRing, keys_file
from crag.app.mcp_engine import Engine
from crag.app.runs import WORKFLOW_NAME, RunService
from crag.app.server.openai.api import openai_routes
from crag.app.server.ops.admission import Admission
from crag.app.server.ops.auth import ApiKeyMiddleware, LocalOnly
from crag.app.server.ops.gate import RunGate
from crag.app.server.ops.guard import RequestGuard, check_bind
from crag.app.server.ops.reload import IndexReloader
from crag.app.server.ops.upkeep import PROBE_REUSE, CancelReport, LiveRuns, Upkeep
from crag.app.server.routes.mcp import mcp_available, mcp_routes
from crag.app.server.routes.pages import crag_routes
from crag.app.server.routes.runs import run_routes
from crag.app.server.store import StoreChoice, store_for
from crag.config import Settings
from crag.errors import IndexNotFoundError, register_secret
from crag.index import ChunkIndex
from crag.index.collections import DEFAULT, check_name, found_collections
from crag.workflows import CorrectiveRAGWorkflow

__all__ = ["WORKFLOW_NAME", "CragServer", "build_server", "serve"]


@dataclass(frozen=True)
class CragServer:
    """crag's app (for uvicorn, or mounted in a larger one), its run service and run store."""

    app: Starlette
    runs: RunService
    store: StoreChoice
    auth: bool


def build_server(
    settings: Settings, *, workflow: CorrectiveRAGWorkflow | None = None, index: ChunkIndex | None = None
) -> CragServer:
    """The server for `settings`: every collection of the index folder (or those `[server]
    collections` names) loaded once, a workflow built once for each and shared by every
    request (its components keep no per-run state), the store `[server] store` names. Given a
    `workflow` (or an `index`), it serves that alone, as the default collection.

    Example:
        crag_server = build_server(Settings.load())
        uvicorn.run(crag_server.app, host="127.0.0.1", port=8000)
    """
    from crag.workflows.factory import build_workflow, open_index, warm_up_workflow

    reloads = workflow is None  # a workflow given with components of its own is not rebuilt
    grade_cache = grade_cache_for(settings) if reloads else None  # PostgreSQL's, on a PostgreSQL store
    served: dict[str, tuple[Settings, CorrectiveRAGWorkflow, ChunkIndex]] = {}
    for name, own in _collections(settings, given=workflow is not None or index is not None).items():
        own_index = index if index is not None else open_index(own)
        own_workflow = workflow or build_workflow(own, index=own_index, grade_cache=grade_cache)
        warm_up_workflow(own_workflow, own_index)  # everything loaded before the first request is accepted,
        served[name] = (own, own_workflow, own_index)
    text.wait_until_loaded()  # Punkt's tables too, which a one-off question would not wait for
    store = store_for(settings)
    key = settings.server.api_key.get_secret_value() if settings.server.api_key else ""
    register_secret(key)  # so that no error message or trace can show it
    keyring = KeyRing(keys_file(settings))  # the keys `crag keys` made, re-read when the file changes
    keyed = bool(key or len(keyring))
    check_bind(settings.server.host, "keyed" if keyed else "")
    live = LiveRuns()
    upkeep = Upkeep(store.store, store.kind, store.where, live=live, keep_runs=settings.server.keep_runs,
                    keep_days=settings.server.keep_days, orphan_after=settings.server.orphan_after)
    # The engine's basic runtime, not the server's default stack: that one serialises every
    # tick of a run twice (to persist it, then for a no-op hook) so that a run can resume
    # mid-way after a restart, which a crag run cannot (its state stays in memory; see
    # store/), and watches for idle runs, which a crag run never is: a large share of the
    # server's CPU per question (benchmarks/throughput.py). The SQLite store marks runs a restart
    # cut off as failed when it starts (SqliteRunStore.start); on shared PostgreSQL the heartbeat
    # sweep does (ops/upkeep.py). Its own middleware is none: crag's app, around it, has crag's.
    server = WorkflowServer(workflow_store=store.store, middleware=[Middleware(_Plain)], runtime=BasicRuntime())
    first, *others = served.items()
    runs = RunService(
        server, store.store, first[1][1], first[1][2],
        admission=Admission(settings.server.max_runs, settings.server.max_queue, max_wait=settings.run.timeout),
        store_problem=lambda: upkeep.store_problem(reuse=PROBE_REUSE),  # a burst of runs: one probe
        live=live.ids,
        collection=first[0],
    )
    for name, (_, own_workflow, own_index) in others:
        runs.serve(own_workflow, own_index, name)
    indexes = {name: _reloader(name, own, runs, grade_cache if reloads else None, reloads)
               for name, (own, _, _) in served.items()}
    engine = Engine.ready(settings, runs)  # the MCP door's
    routes = [
        *run_routes(runs),
        *crag_routes(runs, store.kind, auth=keyed, upkeep=upkeep, indexes=indexes),
        *openai_routes(runs),
        *(mcp_routes(engine) if mcp_available() else []),
        # The server's own routes (events, records, cancel), each behind crag's access check
        # first; a cancel of a run that is not running here is answered by upkeep's report.
        Mount("/", app=RunGate(CancelReport(server.app, upkeep=upkeep), runs)),
    ]
    middleware = [
        Middleware(RequestGuard, max_body_bytes=settings.server.max_body_bytes, local_only=not keyed),
    ]
    # Outermost, checked first: who is asking, for every route (crag.app.access).
    middleware.insert(0, Middleware(ApiKeyMiddleware, admin_key=key, keyring=keyring) if keyed
                      else Middleware(LocalOnly))

    async def beside() -> None:
        """The key ring re-read once a second (a revoked key stops working within about a
        second, a stream it is reading included), and each collection's reloads."""
        await asyncio.gather(keyring.watch(), *(index.run_forever() for index in indexes.values() if reloads))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        """The run store and runtime, then upkeep (and reloads) and the MCP sessions beside the
        app, stopped in the reverse order; the PostgreSQL grade cache's pool closed last."""
        async with AsyncExitStack() as stack:
            if grade_cache is not None:
                stack.push_async_callback(grade_cache.aclose)  # its pool, on the app's event loop
            await stack.enter_async_context(server.contextmanager())
            await stack.enter_async_context(upkeep.running(
                every=settings.server.orphan_after / 3, also=beside))
            if mcp_available():
                await stack.enter_async_context(engine.sessions())
            yield

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    return CragServer(app=app, runs=runs, store=store, auth=keyed)


def _collections(settings: Settings, *, given: bool) -> dict[str, Settings]:
    """The collections to serve, each with its own settings (its index folder): every one the
    index folder holds, or those `[server] collections` names; the default alone when a workflow
    or an index is given, or the folder holds no index yet (whose loading then says so)."""
    if given:
        return {DEFAULT: settings}
    found = found_collections(settings.index.path)
    wanted = settings.server.collections
    if wanted:
        missing = [check_name(name) for name in wanted if name not in found]
        if missing:
            raise IndexNotFoundError(
                f"No collection {', '.join(map(repr, missing))} in {settings.index.path} "
                f"(found: {', '.join(found) or 'none'}). Build it: crag ingest YOUR_DOCS --collection {missing[0]}")
        found = {name: found[name] for name in dict.fromkeys(wanted)}
    if not found:
        return {DEFAULT: settings}
    return {name: settings.for_collection(name) for name in found}


def _reloader(name: str, own: Settings, runs: RunService, grade_cache: object, reloads: bool) -> IndexReloader:
    """The collection's health, and its reloads: a new version an ingest wrote is loaded and
    served without a restart, without touching the other collections."""
    if not reloads:
        return IndexReloader(own.index.path)
    from crag.workflows.factory import build_workflow, open_index

    def rebuild() -> tuple[CorrectiveRAGWorkflow, ChunkIndex]:
        new_index = open_index(own)  # the same cache (and pool) across reloads
        return build_workflow(own, index=new_index, grade_cache=grade_cache), new_index

    return IndexReloader(own.index.path, rebuild, lambda built: runs.serve(*built, name))


class _Plain:
    """No middleware, for the mounted workflow server: given none, it would add a CORS layer
    that lets every origin read its replies, where crag's guard (outside) allows only its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def tune_collector() -> None:
    """Freeze what the server loaded, once everything is loaded: `crag serve` owns its process.

    What exists now (the index, the models, the libraries, the server) is frozen out of the
    garbage collector's view after one full collection, so that its full passes stop walking
    it, and those passes are made rarer (`crag.settle_heap`, which also turns the collector
    back on: `crag serve` held it off while loading). Under benchmarks/throughput.py the two
    cut the server's CPU per question by about a sixth (figures in docs/measured.md). A
    workflow replaced by a reload is not frozen, so it is collected. `build_server` leaves
    the collector alone, for an app that mounts crag's.
    """
    gc.collect()
    settle_heap()


def serve(settings: Settings) -> None:
    """Serve until interrupted, on `[server] host` and `port`, with crag's transport guards
    (a header timeout, a connection cap, no secret in the logs: ops/transport.py)."""
    from crag.app.server.ops.preflight import check_model_key
    from crag.app.server.ops.transport import make_room_for, uvicorn_options

    check_model_key(settings.llm)  # a refused key stops here, not in every run
    crag_server = build_server(settings)
    host, port = settings.server.host, settings.server.port
    print(
        f"crag: serving http://{host}:{port} (workflows "
        f"{', '.join(repr(served.workflow_name) for served in crag_server.runs.visible(ADMIN))}, runs kept in "
        f"{crag_server.store.kind} {crag_server.store.where}, "
        f"{'API key required' if crag_server.auth else 'no API key: anyone who can connect may ask'})"
        + (f"; MCP clients: http://{host}:{port}/mcp" if mcp_available() else ""),
        file=sys.stderr,
    )
    tune_collector()
    make_room_for(settings.server.max_connections)
    config = uvicorn.Config(crag_server.app, host=host, port=port, **uvicorn_options(settings.server))
    asyncio.run(uvicorn.Server(config).serve())
