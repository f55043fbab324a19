"""The one way any door runs a question: `RunService`.

`crag serve`'s run routes, its OpenAI door, its `/mcp` tools and `crag mcp` over stdio all
start, stream, cancel and record their runs here, so each run passes the same checks in the
same order and lands in the same store (the live page, `/handlers` and the trace pages show
runs from every door):

1. the question: empty, overlong or not text is refused (400) before anything starts;
2. the store: while it cannot record runs, refused at once with its reason (503);
3. admission: at most `[server] max_runs` in flight and `max_queue` waiting (503 beyond);
4. the run itself, recorded by the workflow server under its handler id, with its own budget
   (`RecordedWorkflow.run`) and the run timeout; the admission place is given back when the
   run ends, however it ends.

The service also holds what is being served: one workflow and its index per collection
(crag.index.collections; one, "default", unless the server serves several), so that a reload
(`serve`) changes it for every door and for `/health` at once. Every start and every read of
a stored run passes the caller's `Principal` (crag.app.access): a collection or a run the caller
may not see answers as one that does not exist.

`crag ask`, a process that asks one question and exits, runs it through a service of its own
made `in_process`: the same checks, start, event stream and cancellation, with no workflow
server behind it, so the run is recorded nowhere (its trace goes where `--trace` says). A run
store there would keep a run only until the process ends, and importing llama-agents-server
alone costs about 0.1 s of CPU and 8 MB, of a one to two second cold `crag ask`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from workflows.events import StartEvent

from crag.app.access import LOCAL, Principal, Right
from crag.errors import CragError
from crag.index.collections import DEFAULT

if TYPE_CHECKING:
    from llama_agents.client.protocol import HandlerData
    from llama_agents.server import AbstractWorkflowStore, PersistentHandler, WorkflowServer
    from workflows.events import Event
    from workflows.handler import WorkflowHandler

    from crag.events import CragResult
    from crag.index import ChunkIndex
    from crag.workflows import CorrectiveRAGWorkflow

WORKFLOW_NAME = "crag"


def workflow_name(collection: str) -> str:
    """The name a collection's workflow is served and recorded under: "crag", "crag:hr"."""
    return WORKFLOW_NAME if collection == DEFAULT else f"{WORKFLOW_NAME}:{collection}"


def collection_of(name: str) -> str | None:
    """The collection a recorded workflow name belongs to; None for a name crag never serves."""
    if name == WORKFLOW_NAME:
        return DEFAULT
    prefix, colon, collection = name.partition(":")
    return collection if prefix == WORKFLOW_NAME and colon and collection and collection != DEFAULT else None


class RunRefused(CragError):
    """No run was started: `status` is the HTTP status that says why (400, 409, 503)."""

    def __init__(self, message: str, *, status: int, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class Place(Protocol):
    """An admission place, given back once (`crag.app.server.ops.admission.Slot`)."""

    def release(self) -> None: ...


class Admitting(Protocol):
    """Admission control (`crag.app.server.ops.admission.Admission`)."""

    max_runs: int
    max_queue: int

    async def acquire(self) -> Place | None: ...

    def retry_after(self) -> int: ...


StoreProblem = Callable[[], Awaitable["str | None"]]  # why the store cannot record runs now


@dataclass(frozen=True)
class Served:
    """One collection being served: its name, the workflow name its runs are recorded under,
    and the workflow and index that answer it now (a reload replaces them)."""

    collection: str
    workflow_name: str
    workflow: CorrectiveRAGWorkflow
    index: ChunkIndex | None


@dataclass
class Run:
    """A started run: its handler id, and the run itself (awaitable, cancellable)."""

    handler_id: str
    run_id: str
    record: HandlerData | None  # as the store recorded it at the start; None in process
    handler: WorkflowHandler[Any]

    async def events(self) -> AsyncIterator[Event]:
        """The run's events as they happen, ending with its `StopEvent` (or the engine's
        failed, cancelled or timed-out one), read from the run itself: what the store records
        and `GET /events/{id}` sends, without a round trip through the store. Once per run."""
        async for event in self.handler.stream_events():
            yield event

    async def result(self) -> CragResult:
        """The run's result; the run's own error if it failed, was cancelled or timed out."""
        return await self.handler

    async def cancel(self) -> None:
        """Stop the run; it is recorded as cancelled."""
        if not self.handler.is_done():
            await self.handler.cancel_run()

    def cancel_soon(self) -> None:
        """`cancel()` in a task of its own: for a caller that is being cancelled itself (a
        client gone mid-stream), whose own awaits would be cancelled too."""
        if not self.handler.is_done():
            task = asyncio.get_running_loop().create_task(self.cancel())
            _DETACHED.add(task)
            task.add_done_callback(_DETACHED.discard)


class RunService:
    """Starts, streams, cancels and records runs of the served workflow (module docstring).

    `server` records each run in `store`; without one (`in_process`) runs start on the
    workflow itself and are recorded nowhere."""

    def __init__(
        self,
        server: WorkflowServer | None,
        store: AbstractWorkflowStore | None,
        workflow: CorrectiveRAGWorkflow,
        index: ChunkIndex | None,
        *,
        admission: Admitting | None = None,
        store_problem: StoreProblem | None = None,
        live: set[str] | None = None,
        collection: str = DEFAULT,
    ) -> None:
        self.server = server
        self.store = store
        self.admission = admission
        self.store_problem = store_problem
        self.live = live if live is not None else set()  # run ids running here (the heartbeat's)
        self._watchers: set[asyncio.Task[None]] = set()  # held, so that none is collected early
        self._claimed: set[str] = set()  # handler ids of runs starting or running here
        self.collections: dict[str, Served] = {}
        self.serve(workflow, index, collection)

    @classmethod
    def in_process(cls, workflow: CorrectiveRAGWorkflow) -> RunService:
        """A service for a process that asks and exits (`crag ask`): no admission, no store."""
        return cls(None, None, workflow, None)

    # --- what is served ------------------------------------------------------------------------

    def serve(self, workflow: CorrectiveRAGWorkflow, index: ChunkIndex | None, collection: str = DEFAULT) -> None:
        """Serve `workflow` (on `index`) for `collection` from the next run on; running ones keep theirs."""
        name = workflow_name(collection)
        if self.server is not None:
            self.server.add_workflow(name, workflow)
        self.collections[collection] = Served(collection, name, workflow, index)

    @property
    def default(self) -> Served:
        """The default collection, else the first by name (what `served(None)` gives when it is the only one)."""
        return self.collections.get(DEFAULT) or self.collections[min(self.collections)]

    @property
    def workflow(self) -> CorrectiveRAGWorkflow:
        """The default collection's workflow (every collection's has the same graph)."""
        return self.default.workflow

    @property
    def index(self) -> ChunkIndex | None:
        return self.default.index

    def visible(self, principal: Principal, right: Right = "ask") -> list[Served]:
        """The collections `principal` may `right`, the default first, then by name."""
        return [served for name, served in sorted(self.collections.items(), key=lambda kv: (kv[0] != DEFAULT, kv[0]))
                if principal.may(right, name)]

    def served(self, collection: str | None, principal: Principal = LOCAL, right: Right = "ask") -> Served:
        """The collection a request names, if `principal` may `right` it; else `RunRefused` 404,
        the same for a collection that exists and one that does not. None names the default
        collection, or the caller's only one (a key for "hr" alone needs not say "hr")."""
        if collection is None:
            mine = [served.collection for served in self.visible(principal, right)]
            if DEFAULT not in mine and len(mine) == 1:
                collection = mine[0]
            elif DEFAULT in self.collections or len(self.collections) == 1:
                collection = self.default.collection
            else:
                raise RunRefused("This server serves several collections: name one "
                                 f"({', '.join(mine) or 'none you may use'}).", status=400)
        found = self.collections.get(collection)
        if found is None or not principal.may(right, collection):
            raise RunRefused(f"No collection {collection!r}.", status=404)
        return found

    def served_by_workflow(self, name: str, principal: Principal = LOCAL, right: Right = "ask") -> Served:
        """`served` for a workflow name ("crag", "crag:hr"), as the run routes are addressed."""
        collection = collection_of(name)
        if collection is None:
            raise RunRefused(f"No workflow {name!r}.", status=404)
        try:
            return self.served(collection, principal, right)
        except RunRefused:
            raise RunRefused(f"No workflow {name!r}.", status=404) from None

    # --- runs ----------------------------------------------------------------------------------

    async def start(self, start: Mapping[str, Any] | StartEvent, *, handler_id: str | None = None,
                    collection: str | None = None, principal: Principal = LOCAL) -> Run:
        """Start a run of `collection`'s workflow (None: the default) with `start` (its start
        event's fields: `query`, and `history` for a follow-up), recorded as `handler_id` (a new
        one if None). `RunRefused` if it cannot start, saying why; nothing is started or held then.

        A `handler_id` is claimed before anything is awaited, so that requests racing with one
        id start one run: the others get 409, as for an id already in the store. The 409 reads
        the same whatever collection holds the id, and names nothing of it."""
        served = self.served(collection, principal)
        start_event = self._start_event(start, served.workflow)
        if handler_id is not None:
            if handler_id in self._claimed:
                raise RunRefused(_TAKEN.format(handler_id), status=409)
            self._claimed.add(handler_id)
        with ExitStack() as unless_started:
            if handler_id is not None:
                unless_started.callback(self._claimed.discard, handler_id)
            if handler_id is not None and self.store is not None and await self.store.query(_by_id(handler_id)):
                raise RunRefused(_TAKEN.format(handler_id), status=409)
            if self.store_problem is not None and (problem := await self.store_problem()) is not None:
                raise RunRefused(f"No run was started: {problem}. GET /health says when it can record "
                                 "runs again.", status=503, retry_after=STORE_RETRY_AFTER)
            place = await self._place()
            if place is not None:
                unless_started.callback(place.release)
            run = await self._launch(served, start_event, handler_id or _new_id())
            unless_started.pop_all()  # the run holds its place (and its id) until it ends
        self._watch(run, place)
        return run

    async def _launch(self, served: Served, start_event: StartEvent, handler_id: str) -> Run:
        if self.server is None:  # in process: the workflow itself, as the server's service runs it
            run_id = _new_id()
            return Run(handler_id, run_id, None, served.workflow.run(start_event=start_event, run_id=run_id))
        from crag._compat.workflow_server import HandlerAlreadyRunningError, start_run

        try:
            record, handler = await start_run(self.server, served.workflow, handler_id, start_event)
        except HandlerAlreadyRunningError:  # the same id sent twice at once
            raise RunRefused(_TAKEN.format(handler_id), status=409) from None
        return Run(record.handler_id, str(record.run_id), record, handler)

    async def stored(self, handler_id: str, principal: Principal = LOCAL) -> PersistentHandler | None:
        """The stored record of the run `handler_id`, whatever its door, or None: also when it
        belongs to a collection `principal` may not see."""
        if self.store is None:
            return None
        found = await self.store.query(_by_id(handler_id))
        return found[0] if found and self.may_see(found[0].workflow_name, principal) else None

    def may_see(self, recorded_workflow: str, principal: Principal) -> bool:
        """Whether `principal` may see a run recorded under `recorded_workflow` (the one check
        every read of a stored run makes: crag.app.access)."""
        collection = collection_of(recorded_workflow)
        return collection is not None and principal.may("ask", collection)

    @asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        """Hold an admission place for work that is not a run (MCP `search`); `RunRefused`
        when every place and queue place is taken."""
        place = await self._place()
        try:
            yield
        finally:
            if place is not None:
                place.release()

    def _start_event(self, start: Mapping[str, Any] | StartEvent, workflow: CorrectiveRAGWorkflow) -> StartEvent:
        """`start` as the workflow's start event, its question checked as a run would check it."""
        from pydantic import ValidationError

        from crag.errors import QueryError
        from crag.workflows.base import check_query

        try:
            event = start if isinstance(start, StartEvent) else \
                workflow.start_event_class.model_validate(dict(start))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'start event'}: {e['msg']}"
                                 for e in exc.errors())
            raise RunRefused(f"The run cannot start: {problems}.", status=400) from None
        try:
            json.dumps(event.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a "\ud800" escape decodes to a lone surrogate
            raise RunRefused("The request holds a lone surrogate (a \\ud800-\\udfff escape with no "
                             "pair), which is not text; send valid Unicode.", status=400) from None
        try:
            check_query(getattr(event, "query", ""))
        except QueryError as exc:
            raise RunRefused(str(exc), status=400) from None
        return event

    async def _place(self) -> Place | None:
        if self.admission is None:
            return None
        place = await self.admission.acquire()
        if place is None:
            retry = self.admission.retry_after()
            raise RunRefused(f"The server is busy ({self.admission.max_runs} runs in flight, "
                             f"{self.admission.max_queue} waiting); ask again in {retry} s.",
                             status=503, retry_after=retry)
        return place

    def _watch(self, run: Run, place: Place | None) -> None:
        """Give the place back, and drop the run from `live`, when the run ends."""
        self.live.add(run.run_id)

        async def until_end() -> None:
            try:
                await run.handler.stop_event_result()
            except BaseException:  # noqa: BLE001 - however the run ended, its place is free
                pass
            finally:
                if place is not None:
                    place.release()
                self.live.discard(run.run_id)
                self._claimed.discard(run.handler_id)  # the store holds the id from now on

        task = asyncio.create_task(until_end())
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)


_TAKEN = "The handler id {!r} is taken; a handler id names one run. Send another, or none."
STORE_RETRY_AFTER = 5  # seconds: a store outage outlasts a busy moment
_DETACHED: set[asyncio.Task[None]] = set()  # held, so that a pending cancellation is not collected


def _by_id(handler_id: str) -> Any:
    from llama_agents.server import HandlerQuery

    return HandlerQuery(handler_id_in=[handler_id])


def _new_id() -> str:
    return uuid.uuid4().hex
