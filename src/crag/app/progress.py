"""Live progress for the command line: each step of a run as it starts and ends; ingest's bars.

In a terminal, rich draws it; anywhere else (a pipe, a log file, CI), plain lines. It all
goes to stderr, so stdout keeps only the answer (`crag ask --json` prints one JSON object).

From Python the same progress is on the engine's event stream, as typed events, and so is
the answer as it is written:

    handler = workflow.run(query="…")
    async for event in handler.stream_events():
        if isinstance(event, StepProgressEvent):   # step, status, seconds, record
            print(event.step, event.status)
        elif isinstance(event, AnswerDeltaEvent):  # the answer's next piece
            print(event.delta, end="", flush=True)
    result = await handler
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from time import perf_counter
from typing import TYPE_CHECKING, TextIO

from workflows import Workflow

from crag.app.render.overlay import seconds
from crag.events import AnswerDeltaEvent, CragResult, StepProgressEvent
from crag.printable import printable
from crag.trace import StepRecord

if TYPE_CHECKING:
    from workflows.events import Event

    from crag.app.runs import Run
    from crag.ingestion import ProgressCallback

StepCallback = Callable[[StepProgressEvent], None]
DeltaCallback = Callable[[AnswerDeltaEvent], None]
# ingest's stages and what they count; "ocr" starts again at 0 for each scanned file read
STAGES = {"read": "files", "ocr": "pages", "chunk": "documents", "summarize": "documents",
          "embed": "chunks"}


async def run_with_progress(
    workflow: Workflow, query: str, on_step: StepCallback, on_delta: DeltaCallback | None = None
) -> CragResult:
    """Run the workflow on `query`, calling `on_step` with each step's progress event and
    `on_delta` (if given) with each piece of the answer as it is written."""
    handler = workflow.run(query=query)
    await _show(handler.stream_events(), on_step, on_delta)
    return await handler


async def follow(run: Run, on_step: StepCallback, on_delta: DeltaCallback | None = None) -> CragResult:
    """A run started by the run service (`crag.app.runs.RunService.start`), shown as
    `run_with_progress` shows one; its result, or its error (how `crag ask` runs a question)."""
    await _show(run.events(), on_step, on_delta)
    return await run.result()


async def _show(events: AsyncIterator[Event], on_step: StepCallback, on_delta: DeltaCallback | None) -> None:
    async for event in events:
        if isinstance(event, StepProgressEvent):
            on_step(event)
        elif on_delta is not None and isinstance(event, AnswerDeltaEvent):
            on_delta(event)


class AnswerPrinter:
    """Prints the answer to `out` as it is written; a restart (the model failed mid-answer)
    is said on `err` and the fallback's answer starts on a fresh line.

    `step` wraps a step callback so that a progress line never lands mid-answer (a terminal
    shows stdout and stderr on the same lines)."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out, self.err = out or sys.stdout, err or sys.stderr
        self.open = False  # a line of the answer is on the screen, not yet ended

    def __call__(self, ev: AnswerDeltaEvent) -> None:
        if ev.restart:
            self.end()
            print("crag: the model failed mid-answer; the extractive answer follows", file=self.err, flush=True)
        if ev.delta:
            self.out.write(printable(ev.delta))  # the answer quotes documents: ESC shown, not obeyed
            self.out.flush()
            self.open = True

    def end(self) -> None:
        """End the answer's line, if one is open."""
        if self.open:
            self.out.write("\n")
            self.out.flush()
            self.open = False

    def step(self, on_step: StepCallback) -> StepCallback:
        def show(ev: StepProgressEvent) -> None:
            self.end()
            on_step(ev)

        return show


def describe(record: StepRecord | None, took: float | None) -> str:
    """A finished step in a few words: `4.1 ms, 2 LLM calls, 1 search`."""
    parts = [seconds(took or 0.0)]
    if record is not None:
        if record.llm_calls:
            parts.append(f"{record.llm_calls} LLM call{'s' * (record.llm_calls != 1)}")
        if record.search_calls:
            parts.append(f"{record.search_calls} search{'es' * (record.search_calls != 1)}")
        if tokens := record.prompt_tokens + record.completion_tokens:
            parts.append(f"{tokens} tokens")
        if record.degraded:
            parts.append(f"degraded: {record.degraded}")
        if record.error:
            parts.append(f"error: {record.error}")
    return printable(", ".join(parts), lines=False)  # a note may quote a file name or a document


class _StepLines:
    """`crag: grade finished in 3.2 ms`: one line per start and end, for logs."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, ev: StepProgressEvent) -> None:
        if ev.status == "started":
            line = f"crag: {ev.step} started"
        else:
            line = f"crag: {ev.step} finished in {describe(ev.record, ev.seconds)}"
        print(line, file=self.stream, flush=True)


class _IngestLines:
    """`crag: embed 37/37 chunks in 0.05 s, 740 chunks/s`: a line when a stage ends, and one
    at most every `every` seconds while a long stage runs."""

    def __init__(self, stream: TextIO, every: float = 2.0) -> None:
        self.stream, self.every = stream, every
        self.started: dict[str, float] = {}  # stage -> when its first report came
        self.printed = perf_counter()

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = perf_counter()
        if done == 0:
            self.started[stage] = now
        took = now - self.started.setdefault(stage, now)
        if done < total and now - self.printed < self.every:
            return
        self.printed = now
        unit = STAGES.get(stage, "items")
        rate = f", {done / took:,.0f} {unit}/s" if took > 0 and done else ""
        when = f" in {took:.2f} s" if done == total else ""
        print(f"crag: {stage} {done}/{total} {unit}{when}{rate}", file=self.stream, flush=True)


def _console(stream: TextIO, force: bool):  # noqa: ANN202 - rich is imported lazily
    from rich.console import Console

    return Console(file=stream, force_terminal=force or None, highlight=False)


@contextmanager
def step_progress(
    stream: TextIO | None = None, *, rich: bool | None = None
) -> Iterator[StepCallback]:
    """A callback for `run_with_progress` showing steps on `stream` (stderr by default).

    `rich`: draw a live list (default: when the stream is a terminal), else plain lines.
    """
    stream = stream or sys.stderr
    if not (stream.isatty() if rich is None else rich):
        yield _StepLines(stream)
        return
    from rich.markup import escape
    from rich.progress import Progress, SpinnerColumn, TextColumn

    columns = (SpinnerColumn(finished_text="[green]✓[/]"), TextColumn("[bold]{task.description}"),
               TextColumn("{task.fields[info]}"))
    with Progress(*columns, console=_console(stream, bool(rich))) as bar:
        tasks: dict[str, int] = {}

        def show(ev: StepProgressEvent) -> None:
            if ev.status == "started":
                tasks[ev.step] = bar.add_task(ev.step, total=1, info="[dim]running…[/]")
            elif ev.step in tasks:
                info = escape(describe(ev.record, ev.seconds))
                failed = ev.record is not None and ev.record.error
                bar.update(tasks[ev.step], completed=1, info=f"[red]{info}[/]" if failed else info)

        yield show


@contextmanager
def ingest_progress(
    stream: TextIO | None = None, *, rich: bool | None = None
) -> Iterator[ProgressCallback]:
    """A `progress(stage, done, total)` callback for `crag.ingest`: bars with counts and rates
    in a terminal (`rich`, by default when the stream is one), else plain lines."""
    stream = stream or sys.stderr
    if not (stream.isatty() if rich is None else rich):
        yield _IngestLines(stream)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:  # noqa: ANN001 - rich's Task
            took = task.finished_time or task.elapsed or 0.0
            rate = f"{task.completed / took:,.0f}" if took > 0 and task.completed else "–"
            return Text(f"{rate} {task.fields['unit']}/s", style="progress.data.speed")

    columns = (TextColumn("{task.description:<5}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[unit]}"), Rate(), TimeElapsedColumn())
    with Progress(*columns, console=_console(stream, bool(rich))) as bar:
        tasks: dict[str, int] = {}

        def show(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total, unit=STAGES.get(stage, "items"))
            elif done == 0:  # the stage again (the next file's scanned pages): its own rate and time
                bar.reset(tasks[stage], total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield show
