"""`crag mcp`: the workflow as a Model Context Protocol server, on the official `mcp` SDK.

Tools: `ask` (a cited answer, its verdict and sources), `search` (the graded chunks, no answer),
`collections` (the names `ask` and `search` take), and `ingest` (files into the index) only when
the server is started with `allow_ingest`. Resources: `crag://index/manifest` (the default
collection's files and chunk count; `?collection=NAME` or `crag://collections/{name}/manifest`
for another's) and `crag://runs/{run_id}/trace` (a run of this server's). A client that sends a
progress token gets one progress notification per step started and finished.

Each tool and resource names a collection (none: the default, or the only one served) and sees
only what the caller may (crag.app.access): under `crag serve` the key of the HTTP request the
call came in, over stdio this machine's user. A collection, or a run, the caller may not see
answers exactly as one that does not exist. (Resources with a `{...}` in their address are the
only ones the SDK hands the request to, hence the manifest's `{?collection}`.)

Over stdio (`serve_stdio`, what `crag mcp` runs) the server answers `initialize` before the
index and models are loaded: they load in a thread meanwhile, and the first tool call waits for
them; so a client's start-up does not wait on crag's. `crag serve` mounts the same server at
`/mcp` (crag.app.server.routes.mcp).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from workflows.errors import WorkflowTimeoutError

from crag._logs import root_logging_kept
from crag.app.access import NOBODY, Principal, principal_of
from crag.app.mcp_engine import KEEP_TRACES, Engine, manifest
from crag.errors import CragError, redact

if TYPE_CHECKING:  # crag.events and crag.trace import llama-index, most of the start-up: loader thread
    from llama_index.core.schema import NodeWithScore

    from crag.app.runs import Run, Served
    from crag.events import CragResult, Grade
    from crag.steps.graded_retrieval import Graded

__all__ = ["AskOutput", "Engine", "SearchOutput", "build_mcp", "serve_stdio"]


class SourceOut(BaseModel):
    """A source the answer cites as `[number]`."""

    number: int
    kind: str = Field(description="internal (the user's documents) or web")
    citation: str = Field(description="How to find it: file and page, else its title, URL or id.")
    title: str | None = None
    url: str | None = None
    text: str = Field(description="The passages of this source that reached the answer.")


class AskOutput(BaseModel):
    """A cited answer: `[n]` in `answer` is `sources[n-1]`."""

    answer: str
    verdict: str = Field(
        description="correct, ambiguous or incorrect: how well the documents answered"
    )
    sources: list[SourceOut]
    run_id: str = Field(description="Read the run's trace at crag://runs/{run_id}/trace.")
    collection: str = Field(description="The collection that answered.")
    degraded: list[str] = Field(default_factory=list, description="What fell back, and why.")
    cost: dict = Field(default_factory=dict, description="Model calls and tokens; `estimated`: some "
                       "token counts were counted by crag, the server reported none.")


class Hit(BaseModel):
    """A retrieved chunk and its grade."""

    text: str
    score: float = Field(description="Relevance in [0, 1] from the grader.")
    source: str = Field(description="Its citation: file and page, else the document's title.")
    doc_id: str | None = None
    chunk_id: str


class SearchOutput(BaseModel):
    """The chunks retrieved for the question, graded, best first; no answer is written."""

    verdict: str = Field(description="What the grades alone say: correct, ambiguous or incorrect")
    chunks: list[Hit]
    collection: str = Field(description="The collection searched.")


class CollectionsOutput(BaseModel):
    """The collections this caller may ask, the default (or only) one first."""

    collections: list[str]


Collection = Annotated[str | None, Field(description="The collection to ask (the `collections` tool lists "
                                          "them); none: the default one, or the only one.")]


def build_mcp(engine: Engine, *, allow_ingest: bool = False) -> MCPServer:
    """The MCP server over `engine`: tools `ask` and `search` (and `ingest` if `allow_ingest`),
    the manifest and trace resources."""
    # The SDK calls logging.basicConfig (rich tracebacks, on the root logger) as it builds a
    # server: it would choose how every library in the host process logs (crag._logs).
    with root_logging_kept():
        server = MCPServer(
            "crag",
            version=_version(),
            instructions="Answers questions from the user's indexed documents, with [n] citations; "
            "falls back to web search when the documents do not answer.",
            log_level="WARNING",  # stderr stays quiet: for a stdio client it is the server's log
        )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=True)

    @server.tool(annotations=read_only)
    async def ask(question: str, ctx: Context, collection: Collection = None) -> Annotated[CallToolResult, AskOutput]:
        """Answer a question from the indexed documents, citing them as [n]; when they do not
        answer it, the web is searched. Returns the answer, the verdict and the sources."""
        with _told():
            runs = await engine.runs()
            principal = _asking(ctx, engine)
            served = runs.served(collection, principal)
            run = await runs.start({"query": question}, collection=served.collection, principal=principal)
            result = await _followed(run, ctx)
        await engine.kept(run.handler_id)
        out = _ask_output(result, run.handler_id, served.collection)
        return CallToolResult(
            content=[TextContent(type="text", text=_ask_text(out))],
            structured_content=out.model_dump(mode="json"),
        )

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    async def search(
        question: str,
        ctx: Context,
        top_k: Annotated[int | None, Field(ge=1, description="at most this many")] = None,
        collection: Collection = None,
    ) -> SearchOutput:
        """Find the chunks of the indexed documents that bear on a question, each graded for
        relevance (0 to 1), best first; no answer is written and the web is not searched."""
        with _told():
            from crag.workflows.base import (
                check_query,  # loaded with the workflow: no start-up cost
            )

            served = (await engine.runs()).served(collection, _asking(ctx, engine))
            workflow = served.workflow
            query = check_query(question)
            async with engine.admitted():  # its grader may call the model as a run's does
                # and its calls are bounded as a run's are: the run's budget, deadline and time limit
                graded = await workflow.retrieval.alone(
                    query, budget=workflow.new_budget(), timeout=engine.settings.run.timeout
                )
            return _search_output(graded, top_k, served.collection)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    async def collections(ctx: Context) -> CollectionsOutput:
        """The collections you may ask (name one in `ask` or `search`), the default one first."""
        with _told():
            runs = await engine.runs()
            return CollectionsOutput(collections=[s.collection for s in runs.visible(_asking(ctx, engine))])

    async def manifest_of(collection: str | None, ctx: Context) -> str:
        with _told(ResourceError):
            served = await _served_resource(engine, collection, ctx)
            found = await anyio.to_thread.run_sync(manifest, engine.index_path(served.collection))
            return json.dumps({"collection": served.collection, **found}, indent=1)

    @server.resource("crag://index/manifest{?collection}", mime_type="application/json")
    async def index_manifest(ctx: Context, collection: str | None = None) -> str:
        """The index: its folder, chunk count, chunker, and each file with its size and hash;
        of the default collection, or the one `?collection=` names."""
        return await manifest_of(collection, ctx)

    @server.resource("crag://collections/{name}/manifest", mime_type="application/json")
    async def collection_manifest(name: str, ctx: Context) -> str:
        """A collection's index: its chunk count, chunker, and each file with its size and hash."""
        return await manifest_of(name, ctx)

    @server.resource("crag://runs/{run_id}/trace", mime_type="application/json")
    async def trace(run_id: str, ctx: Context) -> str:
        """A run's trace (steps, times, calls, why each turn), for a finished run."""
        with _told(ResourceError):  # a run of a collection the caller may not see is missing
            record = await (await engine.runs()).stored(run_id, _asking(ctx, engine))
        value = record.result.result if record is not None and record.result is not None else None
        if value is None:
            raise ResourceNotFoundError(
                f"No run {run_id} here (or it has not finished): over stdio, traces are kept for the last "
                f"{KEEP_TRACES} runs of this server process; ask again for a new one."
            )
        from crag.events import CragResult

        return CragResult.model_validate(value).trace.model_dump_json(indent=1)

    if allow_ingest:
        from crag.app.mcp_ingest import add_ingest_tool

        add_ingest_tool(server, engine)
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("crag-workflows")  # the distribution's name (pyproject.toml), not the import's
    except PackageNotFoundError:  # run from a source tree that was never installed
        return ""


def _asking(ctx: Context, engine: Engine) -> Principal:
    """Who makes this call: under `crag serve`, the principal the door (ops/auth.py) left on the
    HTTP request the call came in (for streamable HTTP the SDK hands each call its own POST's
    Starlette request, so a session's calls are each judged by their own key); with no request,
    `engine.unnamed` (over stdio this machine's user, on a server nobody)."""
    try:
        request = ctx.request_context.request
    except ValueError:  # no request at all: a call from inside this process
        request = None
    if request is None:
        return engine.unnamed
    scope = getattr(request, "scope", None)
    return principal_of(scope) if isinstance(scope, dict) else NOBODY


async def _served_resource(engine: Engine, collection: str | None, ctx: Context) -> Served:
    """The collection a resource names, if the caller may see it; else not found, the same for
    a collection that exists and one that does not."""
    from crag.app.runs import RunRefused

    try:
        return (await engine.runs()).served(collection, _asking(ctx, engine))
    except RunRefused as refused:
        if refused.status == 404:
            raise ResourceNotFoundError(str(refused)) from None
        raise


@contextmanager
def _told(error: type[Exception] = ToolError) -> Iterator[None]:
    """crag's own errors reach the client as `error` (a tool's or a resource's) with their
    message, which says what to do; the SDK hides any other exception's, right for a bug."""
    try:
        yield
    except CragError as exc:
        raise error(redact(str(exc))) from None
    except WorkflowTimeoutError as exc:
        raise error(f"The run was cancelled: {exc} (raise [run] timeout).") from None
    except asyncio.TimeoutError:
        raise error("The search took longer than [run] timeout allows, and was cancelled.") from None


async def _followed(run: Run, ctx: Context) -> CragResult:
    """The run's result, one progress notification per step event (a no-op without a token)."""
    from crag.events import StepProgressEvent

    done = 0
    async for event in run.events():
        if isinstance(event, StepProgressEvent):
            done += 1  # the total is unknown: how many steps run depends on the verdict
            took = f" in {event.seconds * 1000:.0f} ms" if event.seconds is not None else ""
            await ctx.report_progress(done, None, f"{event.step} {event.status}{took}")
    return await run.result()


def _ask_output(result: CragResult, run_id: str, collection: str) -> AskOutput:
    sources = [
        SourceOut(
            number=s.number,
            kind=s.kind,
            citation=s.label(),
            title=s.title,
            url=s.url,
            text=s.text,
        )
        for s in result.sources
    ]
    return AskOutput(
        answer=result.answer,
        verdict=result.verdict.value,
        sources=sources,
        run_id=run_id,
        collection=collection,
        degraded=result.degraded,
        cost=result.cost.model_dump(mode="json"),
    )


def _ask_text(out: AskOutput) -> str:
    """What a client without structured output shows: the answer, then its sources."""
    lines = [out.answer, "", f"verdict: {out.verdict}"]
    lines += [f"[{s.number}] {s.citation}" for s in out.sources]
    return "\n".join(lines)


def _search_output(graded: Graded, top_k: int | None, collection: str) -> SearchOutput:
    """The graded chunks, best first, and the verdict they make."""
    hits = sorted((_hit(c, g) for c, g in zip(graded.chunks, graded.grades)), key=lambda h: -h.score)
    return SearchOutput(verdict=graded.verdict.value, chunks=hits[:top_k] if top_k else hits, collection=collection)


def _hit(chunk: NodeWithScore, grade: Grade) -> Hit:
    from crag.trace import Location

    meta = chunk.node.metadata
    where = Location(**Location.fields(meta)).citation() or meta.get("title") or meta.get("doc_id")
    return Hit(
        text=chunk.node.get_content(),
        score=grade.score,
        source=str(where or chunk.node.node_id),
        doc_id=meta.get("doc_id"),
        chunk_id=chunk.node.node_id,
    )


async def serve_stdio(engine: Engine, *, allow_ingest: bool = False) -> None:
    """Serve over stdin/stdout until the client closes them (`engine` may be loading still)."""
    await build_mcp(engine, allow_ingest=allow_ingest).run_stdio_async()
