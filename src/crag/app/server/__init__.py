"""`crag serve`: the workflow over HTTP, on llama-agents-server's `WorkflowServer`.

The server's own routes run it and keep its runs (`POST /workflows/crag/run`,
`POST /workflows/crag/run-nowait`, `GET /events/{handler_id}`, `GET /handlers/{handler_id}`,
`GET /handlers`); crag adds what they lack:

    GET /health                        open to all: index size, store kind, whether keys are on
    GET /handlers/{handler_id}/trace   a finished run's path on the graph, one offline HTML page
    GET /handlers?limit=N&before=ID    the runs newest first, a page at a time (in place of the
                                       server's own, which lists every run at once)
    POST /v1/chat/completions          the OpenAI-compatible door (openai_api.py), model "crag";
    GET /v1/models                     its runs go through the run route above (inner.py)
    /mcp                               the MCP door (mcp_route.py), streamable HTTP, with crag[mcp]

    auth.py        the API key check (middleware)
    validation.py  an unusable question is a 400 before any run starts (middleware)
    routes.py      the routes above; listing.py the paged /handlers
    stores.py      SQLite beside the index by default, PostgreSQL from a URL
    storegate.py   a run request is a 503 at once while the store cannot record runs
    upkeep.py      health probes, pruning, the orphan sweep; unrecorded.py runs whose end
                   the store refused; bounded.py waiting on a store that does not answer
"""

from __future__ import annotations

import asyncio
import gc
import sys
from dataclasses import dataclass

from llama_agents.server import WorkflowServer
from starlette.middleware import Middleware
from workflows.plugins.basic import BasicRuntime

from crag import text
from crag._offload import settle_heap
from crag.app.mcp_engine import Engine
from crag.app.server.admission import Admission, AdmissionMiddleware, track_runs
from crag.app.server.auth import ApiKeyMiddleware
from crag.app.server.guard import RequestGuard, check_bind
from crag.app.server.mcp_route import admitted, mcp_available, mcp_routes
from crag.app.server.openai_api import openai_routes
from crag.app.server.reload import IndexReloader
from crag.app.server.routes import WORKFLOW_NAME, crag_routes
from crag.app.server.storegate import StoreGate
from crag.app.server.stores import StoreChoice, grade_cache_for, store_for
from crag.app.server.upkeep import CancelReport, LiveRuns, Upkeep, closing_on_shutdown, with_upkeep
from crag.app.server.validation import QueryCheckMiddleware
from crag.config import Settings
from crag.errors import register_secret
from crag.index import ChunkIndex
from crag.workflows import CorrectiveRAGWorkflow

__all__ = ["CragServer", "WORKFLOW_NAME", "build_server", "serve"]


@dataclass(frozen=True)
class CragServer:
    """A `WorkflowServer` serving crag's workflow, and the store that keeps its runs."""

    server: WorkflowServer
    store: StoreChoice
    auth: bool

    @property
    def app(self):  # noqa: ANN201 - a Starlette app, for uvicorn or mounting in a larger one
        return self.server.app


def build_server(
    settings: Settings, *, workflow: CorrectiveRAGWorkflow | None = None, index: ChunkIndex | None = None
) -> CragServer:
    """The server for `settings`: the index loaded once, the workflow built once and shared by
    every request (its components keep no per-run state), the store `[server] store` names.

    Example:
        crag_server = build_server(Settings.load())
        await crag_server.server.serve(host="127.0.0.1", port=8000)
    """
    from crag.workflows.factory import build_workflow, warm_up_workflow

    index = index if index is not None else ChunkIndex.load(settings.index.path)
    reloads = workflow is None  # a workflow given with components of its own is not rebuilt
    grade_cache = grade_cache_for(settings) if reloads else None  # PostgreSQL's, on a PostgreSQL store
    workflow = workflow or build_workflow(settings, index=index, grade_cache=grade_cache)
    warm_up_workflow(workflow, index)  # everything loaded before the first request is accepted,
    text.wait_until_loaded()  # Punkt's tables too, which a one-off question would not wait for
    store = store_for(settings)
    key = settings.server.api_key.get_secret_value() if settings.server.api_key else ""
    register_secret(key)  # so that no error message or trace can show it
    check_bind(settings.server.host, key)
    admission = Admission(settings.server.max_runs, settings.server.max_queue, max_wait=settings.run.timeout)
    live = LiveRuns()
    track_runs(workflow, live.ids)
    upkeep = Upkeep(store.store, store.kind, store.where, live=live, keep_runs=settings.server.keep_runs,
                    keep_days=settings.server.keep_days, orphan_after=settings.server.orphan_after,
                    index_path=settings.index.path)
    middleware = [
        Middleware(RequestGuard, max_body_bytes=settings.server.max_body_bytes, local_only=not key),
        Middleware(QueryCheckMiddleware),
        Middleware(StoreGate, upkeep=upkeep),  # ahead of admission: no slot held for a refusal
        Middleware(AdmissionMiddleware, admission=admission),
        Middleware(CancelReport, upkeep=upkeep),
    ]
    if key:
        middleware.insert(0, Middleware(ApiKeyMiddleware, api_key=key))  # outermost: checked first
    # The engine's basic runtime, not the server's default stack: that one serialises every
    # tick of a run twice (to persist it, then for a no-op hook) so that a run can resume
    # mid-way after a restart, which a crag run cannot (its state stays in memory; see
    # stores.py), and watches for idle runs, which a crag run never is: a large share of the
    # server's CPU per question (benchmarks/throughput.py). The SQLite store marks runs a restart cut off
    # as failed when it starts (SqliteRunStore.start); on shared PostgreSQL the heartbeat sweep
    # does (upkeep.py).
    server = WorkflowServer(workflow_store=store.store, middleware=middleware, runtime=BasicRuntime())
    server.add_workflow(WORKFLOW_NAME, workflow)
    engine = Engine.ready(settings, workflow, admitted(admission))  # the MCP door's; follows reloads
    # Ahead of the server's routes, so crag's /health (which says more) answers, not its own.
    server.app.router.routes[:0] = [
        *crag_routes(workflow, index, store.store, store.kind, auth=bool(key), upkeep=upkeep),
        *openai_routes(server.app, WORKFLOW_NAME),  # each run through the app's own run route
        *(mcp_routes(server.app, engine) if mcp_available() else []),
    ]
    reloader = None
    if reloads:

        def install(new: CorrectiveRAGWorkflow) -> None:
            track_runs(new, live.ids)
            server.add_workflow(WORKFLOW_NAME, new)  # the next run gets it; running ones keep theirs
            engine.replace(new)

        rebuild = lambda: build_workflow(  # noqa: E731 - the same cache (and pool) across reloads
            settings, index=ChunkIndex.load(settings.index.path), grade_cache=grade_cache)
        reloader = IndexReloader(settings.index.path, rebuild, install, upkeep)
    with_upkeep(server.app, upkeep, every=settings.server.orphan_after / 3,
                also=reloader.run_forever if reloader else None)
    if grade_cache is not None:
        closing_on_shutdown(server.app, grade_cache.aclose)  # its pool, on the app's event loop
    return CragServer(server=server, store=store, auth=bool(key))


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
    """Serve until interrupted, on `[server] host` and `port`."""
    from crag.app.server.preflight import check_model_key

    check_model_key(settings.llm)  # a refused key stops here, not in every run
    crag_server = build_server(settings)
    host, port = settings.server.host, settings.server.port
    print(
        f"crag: serving http://{host}:{port} (workflow '{WORKFLOW_NAME}', runs kept in "
        f"{crag_server.store.kind} {crag_server.store.where}, "
        f"{'API key required' if crag_server.auth else 'no API key: anyone who can connect may ask'})"
        + (f"; MCP clients: http://{host}:{port}/mcp" if mcp_available() else ""),
        file=sys.stderr,
    )
    tune_collector()
    asyncio.run(crag_server.server.serve(host=host, port=port))
