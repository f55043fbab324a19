"""What one run did: which steps ran, when, with which events, and the model and search calls.

Every `CragResult` carries a `RunTrace`; `crag ask --trace FILE.json` saves it and
`crag draw --trace FILE.json` draws it on the workflow's graph.

LLM calls are counted through llama-index's instrumentation (every LLM emits
`LLMChatEndEvent`), attributed to the step that made them by a context variable that
each step sets while it runs; asyncio tasks inherit it, so concurrent calls count too.
"""

from __future__ import annotations

import contextvars
import hashlib
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from time import perf_counter
from typing import Any, TypeVar

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMCompletionEndEvent
from pydantic import BaseModel, Field

from crag.cost import call_tokens, count_tokens, messages_text
from crag.errors import redact

E = TypeVar("E")
T = TypeVar("T")


class StepRecord(BaseModel):
    """One step's work in a run; times are seconds since the run started."""

    name: str
    input_event: str
    output_events: list[str] = Field(default_factory=list)
    started: float
    ended: float = 0.0
    llm_calls: int = 0
    search_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated_tokens: bool = False  # some token counts were counted here, the server gave none
    cache_hits: int = 0  # grades read from the grade cache instead of asking the model
    error: str | None = None
    degraded: str | None = None
    substeps: list[StepRecord] = Field(
        default_factory=list,
        description="Work done inside this step, each with its own times and calls (a hop's "
        "retrieve, grade, refine and web search); the step's own figures do not include theirs.",
    )
    details: dict[str, Any] = Field(
        default_factory=dict, exclude=True, repr=False,
        description="What the step decided, for the run's `Explanation`; not in the record's JSON "
        "(nor on the event stream).",
    )

    @property
    def seconds(self) -> float:
        return max(0.0, self.ended - self.started)

    def walk(self) -> Iterator[StepRecord]:
        """This record, then its sub-steps' (depth first): what adds up to the step's calls."""
        yield self
        for child in self.substeps:
            yield from child.walk()

    def degrade(self, message: str) -> None:
        """Add `message` to what degraded in this step, after what is there (one step may fall
        back more than once: a batch grade, then some chunks' grades)."""
        self.degraded = f"{self.degraded}; {message}" if self.degraded else message

    def emit(self, event: E) -> E:
        """Note that this step emits `event`, and return it."""
        self.output_events.append(type(event).__name__)
        return event


class GradeLine(BaseModel):
    """One retrieved chunk's grade, and what the chunk was."""

    chunk_id: str
    score: float
    grader: str
    note: str | None = None
    title: str | None = None


class StripLine(BaseModel):
    """A strip knowledge refinement kept or dropped, with its source."""

    text: str
    source_id: str
    kind: str
    score: float
    kept: bool
    title: str | None = None
    url: str | None = None


_FILE_ID = re.compile(r"[0-9a-f]{16}")


def file_id(key: str) -> str:
    """A file's id from its key in the index's manifest (its absolute path): what a link, a
    document's id and a chunk's `file` name, without showing where the file lives. An id is
    its own id: chunks ingested since issue 33 hold it, older ones the path."""
    if _FILE_ID.fullmatch(key):
        return key
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class Location(BaseModel):
    """Where a chunk sits in the file it came from, read from its metadata: the file's name and
    the page, slide, notebook cell, table rows or section that hold it, where they apply."""

    file: str | None = Field(default=None, description="The file's name (documents: PDF, Word...).")
    page: str | None = Field(default=None, description="A PDF page's own label, else its number.")
    slide: int | None = None
    cell: int | None = Field(default=None, description="A notebook cell's 1-based number.")
    rows: str | None = Field(default=None, description='A table\'s line numbers, "2-40".')
    section: str | None = Field(default=None, description="The heading path, 'Setup / Wiring'.")
    file_id: str | None = Field(
        default=None, description="The file's id in the index (`crag serve` serves it at /files/ID).")
    ocr: bool = Field(default=False, description="Its text was read by OCR (a scanned page, an image).")

    @staticmethod
    def fields(metadata: dict[str, Any]) -> dict[str, Any]:
        """The location fields in a chunk's `metadata` (its `file_name` becomes `file`)."""
        found = {key: metadata[key] for key in ("page", "slide", "cell", "rows", "section")
                 if metadata.get(key) not in (None, "")}
        if metadata.get("file_name"):
            found["file"] = metadata["file_name"]
            if metadata.get("file"):  # the file's id (its manifest key, the path, in older indexes)
                found["file_id"] = file_id(metadata["file"])
        if "page" in found:
            found["page"] = str(found["page"])
        if metadata.get("ocr"):
            found["ocr"] = True
        return found

    def citation(self) -> str | None:
        """How a person finds the passage: "handbook.pdf, p. 12", "deck.pptx, slide 3 (Pricing)",
        "scan.pdf, p. 2, OCR" for text read from a scanned page (it may hold misread words);
        None for a chunk with no file name (Markdown, text, the web), cited by its title."""
        if not self.file:
            return None
        place = next((text for value, text in [
            (self.page, f"p. {self.page}"), (self.slide, f"slide {self.slide}"),
            (self.cell, f"cell {self.cell}"), (self.rows, f"rows {self.rows}")] if value), None)
        where = f"{self.file}, {place}" if place else self.file
        where = f"{where}, OCR" if self.ocr else where
        return f"{where} ({self.section})" if self.section else where


class SourceLine(Location):
    """A source the answer cites as `[number]`."""

    number: int
    kind: str
    id: str
    title: str | None = None
    url: str | None = None


class HopLine(BaseModel):
    """A further hop the run took: what it asked, and what it found."""

    question: str = Field(description="What the hop retrieved and searched with.")
    bridge: str | None = Field(
        default=None, description="The name it hopped to, read from the first pass's best strips (a bridge).")
    found_in: str | None = Field(default=None, description="The title of the strip the bridge was read from.")
    graded_against: str | None = Field(default=None, description="What its chunks were graded against.")
    verdict: str
    searched: bool
    strips: int = Field(description="Strips it kept.")
    found: list[str] = Field(default_factory=list, description="The titles of the documents its strips came from.")


class Explanation(BaseModel):
    """Why a run went the way it did; built once, when it ends, from what its steps decided."""

    verdict: str
    rule: str = Field(description="The verdict rule as it applied, in one sentence.")
    upper: float
    lower: float
    grades: list[GradeLine] = Field(default_factory=list)
    rewritten_query: str | None = None
    web: bool = Field(default=True, description="Whether a web search was configured.")
    hops: list[HopLine] = Field(default_factory=list, description="The further hops, in order.")
    strips: list[StripLine] = Field(default_factory=list, description="Kept, then dropped (best first).")
    dropped_unlisted: int = Field(default=0, description="Dropped strips left out of `strips`.")
    answer: str = ""
    sources: list[SourceLine] = Field(default_factory=list)
    degraded: list[str] = Field(default_factory=list)


class RunTrace(BaseModel):
    """The path one run took through the workflow, and why (`explanation`)."""

    query: str = ""
    asked: str | None = Field(default=None, description="A follow-up as asked, when `query` is it made standalone.")
    verdict: str | None = None
    started_at: datetime = Field(default_factory=datetime.now)
    seconds: float = 0.0
    steps: list[StepRecord] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="What the whole run was limited by (a budget).")
    explanation: Explanation | None = None

    def records(self) -> Iterator[StepRecord]:
        """Every step's record and its sub-steps'."""
        for step in self.steps:
            yield from step.walk()

    @property
    def llm_calls(self) -> int:
        return sum(s.llm_calls for s in self.records())

    @property
    def search_calls(self) -> int:
        return sum(s.search_calls for s in self.records())

    @property
    def tokens(self) -> int:
        return sum(s.prompt_tokens + s.completion_tokens for s in self.records())

    @property
    def degraded(self) -> list[str]:
        """What went wrong but was worked around, one line per affected step."""
        return [f"{s.name}: {s.degraded}" for s in self.steps if s.degraded] + self.notes

    def step_names(self) -> list[str]:
        """Steps that did their work, in the order they finished."""
        return [s.name for s in sorted(self.steps, key=lambda s: s.ended)]

    def summary(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "seconds": round(self.seconds, 4),
            "steps": self.step_names(),
            "llm_calls": self.llm_calls,
            "search_calls": self.search_calls,
            "tokens": self.tokens,
            "degraded": self.degraded,
        }


_current_step: contextvars.ContextVar[StepRecord | None] = contextvars.ContextVar(
    "crag_current_step", default=None
)
_run_origin: contextvars.ContextVar[float] = contextvars.ContextVar("crag_run_origin", default=0.0)


@contextmanager
def attributing_calls_to(record: StepRecord, origin: float | None = None) -> Iterator[StepRecord]:
    """LLM calls made inside this block (and tasks it starts) are counted on `record`; `origin`
    is the run's start (`perf_counter()`), which times its sub-steps."""
    token = _current_step.set(record)
    start = _run_origin.set(origin) if origin is not None else None
    try:
        yield record
    finally:
        _current_step.reset(token)
        if start is not None:
            _run_origin.reset(start)


@contextmanager
def substep(parent: StepRecord, name: str) -> Iterator[StepRecord]:
    """Record the block as a sub-step of `parent` (its own times; model calls made inside it,
    and tasks it starts, are counted on it)."""
    origin = _run_origin.get()
    child = StepRecord(name=name, input_event=parent.name, started=perf_counter() - origin)
    try:
        with attributing_calls_to(child):
            yield child
    finally:
        child.ended = perf_counter() - origin
        parent.substeps.append(child)


def note_degraded(message: str) -> None:
    """Say on the running step's trace record that a fallback stood in (no-op outside a step).

    Components call this when they recover from a failure themselves, so the run's
    `degraded` list still tells the user.
    """
    record = _current_step.get()
    if record is not None:
        record.degrade(message)


def note_model_call() -> None:
    """Count a model call made without llama-index (a rerank request) on the running step, whether
    or not it answers: it was sent; its tokens are no chat model's (no-op outside a step)."""
    record = _current_step.get()
    if record is not None:
        record.llm_calls += 1


def note_unfinished_call(prompt: str) -> None:
    """Count a model call that ended without a reply (the run's deadline ended it, the server
    failed) on the running step: it was sent, so it costs; its prompt tokens are counted here,
    as the server reported none (no-op outside a step)."""
    record = _current_step.get()
    if record is not None:
        record.llm_calls += 1
        record.prompt_tokens += count_tokens(prompt)
        record.estimated_tokens = True


def note_cache_hits(count: int) -> None:
    """Count grades the running step read from the grade cache (no-op outside a step)."""
    record = _current_step.get()
    if record is not None:
        record.cache_hits += count


def note_dropped(strips: list[Any]) -> None:
    """Keep the strips a refiner dropped on the running step's record (no-op outside a step),
    so the run's explanation can show them beside the kept ones."""
    record = _current_step.get()
    if record is not None:
        record.details.setdefault("dropped", []).extend(strips)


_CALL_ENDS = (LLMChatEndEvent, LLMCompletionEndEvent)


class _LLMCallCounter(BaseEventHandler):
    """Counts finished LLM calls, and their tokens, on the step that made them."""

    @classmethod
    def class_name(cls) -> str:
        return "CragLLMCallCounter"

    def handle(self, event: BaseEvent, **kwargs: object) -> None:
        # Called for every instrumentation event of the process (each step's spans too):
        # the type check first, against a tuple (a `X | Y` union checks slower).
        if not isinstance(event, _CALL_ENDS):
            return
        record = _current_step.get()
        if record is None:
            return
        record.llm_calls += 1
        usage = getattr(event.response, "additional_kwargs", None)
        prompt_tokens, completion_tokens, estimated = call_tokens(usage, lambda: _call_texts(event))
        record.prompt_tokens += prompt_tokens
        record.completion_tokens += completion_tokens
        record.estimated_tokens |= estimated


def _call_texts(event: BaseEvent) -> tuple[str, str]:
    """The prompt and the reply of a finished chat or completion call, as text."""
    if isinstance(event, LLMChatEndEvent):
        return messages_text(event.messages), str(event.response.message.content or "") if event.response else ""
    return str(event.prompt), event.response.text if event.response else ""


def install_llm_call_counter() -> None:
    """Register the counter on llama-index's root dispatcher, once per process."""
    root = get_dispatcher()
    if not any(isinstance(h, _LLMCallCounter) for h in root.event_handlers):
        root.add_event_handler(_LLMCallCounter())


async def or_fallback(
    record: StepRecord, what: str, remedy: str,
    attempt: Callable[[], Awaitable[T]], fallback: Callable[[], Awaitable[T]],
) -> T:
    """`attempt()`, or, when it fails in any way, `fallback()` (an offline component), with the
    step's record saying "`what` failed (why); `remedy`". One place for the workflow's rule: a
    component's failure costs quality, never the run."""
    try:
        return await attempt()
    except Exception as exc:  # noqa: BLE001 - any failure of the component has the same remedy
        record.degrade(f"{what} failed ({describe(exc)}); {remedy}")
        return await fallback()


def describe(exc: BaseException) -> str:
    """One line for the trace and `degraded`, without API keys (an error body may echo one)."""
    return redact(f"{type(exc).__name__}: {exc}")[:300]
