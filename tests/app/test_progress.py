"""Live progress: typed events on the engine's stream, and what `crag` prints from them."""

from __future__ import annotations

import io
from pathlib import Path

from support.paths import SAMPLES

from crag import Settings, build_workflow, ingest
from crag.app.progress import ingest_progress, run_with_progress, step_progress
from crag.events import StepProgressEvent

WEB_PATH = ["retrieve", "postprocess", "grade", "rewrite", "web_search", "refine_web", "hop", "synthesize"]


async def test_stream_events_yields_a_start_and_a_finish_per_step_with_its_record(sample_settings: Settings) -> None:
    handler = build_workflow(sample_settings).run(query="Who invented the lithium-ion battery?")
    events = [e async for e in handler.stream_events() if isinstance(e, StepProgressEvent)]
    result = await handler
    assert sorted(e.step for e in events if e.status == "started") == sorted(WEB_PATH)
    finished = [e for e in events if e.status == "finished"]
    assert [e.record for e in finished] == sorted(result.trace.steps, key=lambda r: r.ended)
    assert all(e.seconds == e.record.seconds for e in finished)
    for name in WEB_PATH:  # each step starts before it finishes
        assert events.index(next(e for e in events if e.step == name)) < events.index(
            next(e for e in finished if e.step == name))


async def test_plain_lines_name_each_step_as_it_starts_and_finishes(sample_settings: Settings) -> None:
    stream = io.StringIO()  # not a terminal: plain lines, as in CI logs
    with step_progress(stream) as on_step:
        result = await run_with_progress(build_workflow(sample_settings), "Who invented the lithium-ion battery?", on_step)
    lines = stream.getvalue().splitlines()
    assert result.verdict.value == "incorrect" and len(lines) == 2 * len(WEB_PATH)
    assert lines[0] == "crag: retrieve started"  # the speculative rewrite may start and end meanwhile
    for name in WEB_PATH:  # each step starts, then finishes
        started = lines.index(f"crag: {name} started")
        assert any(line.startswith(f"crag: {name} finished in ") for line in lines[started + 1:])
    assert any(line.startswith("crag: web_search finished in ") and line.endswith(" ms, 1 search") for line in lines)
    assert "\x1b" not in stream.getvalue()  # no terminal codes in a log


async def test_a_terminal_gets_a_live_list_of_steps(sample_settings: Settings) -> None:
    stream = io.StringIO()
    with step_progress(stream, rich=True) as on_step:
        await run_with_progress(build_workflow(sample_settings), "What warranty does Lumen give on the Helio H10?", on_step)
    shown = stream.getvalue()
    assert "✓" in shown and all(name in shown for name in ("retrieve", "postprocess", "grade", "refine_internal", "synthesize"))


def test_ingest_lines_count_files_and_chunks_with_a_rate(tmp_path: Path) -> None:
    stream = io.StringIO()
    with ingest_progress(stream) as progress:
        report = ingest([SAMPLES / "docs"], tmp_path / "index", progress=progress)
    read, embed = stream.getvalue().splitlines()
    assert read.startswith("crag: read 4/4 files in ") and read.endswith(" files/s")
    assert embed.startswith(f"crag: embed {report.chunks_added}/{report.chunks_added} chunks in ")
    assert embed.endswith(" chunks/s")
    stream = io.StringIO()
    with ingest_progress(stream) as progress:  # unchanged files count as read; nothing to embed
        ingest([SAMPLES / "docs"], tmp_path / "index", progress=progress)
    assert stream.getvalue().startswith("crag: read 4/4 files in ") and "embed" not in stream.getvalue()


def test_a_long_stage_prints_at_most_a_line_every_few_seconds_then_its_total() -> None:
    stream = io.StringIO()
    with ingest_progress(stream) as progress:
        for done in range(0, 1001):
            progress("embed", done, 1000)
    (line,) = stream.getvalue().splitlines()
    assert line.startswith("crag: embed 1000/1000 chunks in ")


def test_a_terminal_gets_bars_with_counts_and_rates(tmp_path: Path) -> None:
    stream = io.StringIO()
    with ingest_progress(stream, rich=True) as progress:
        ingest([SAMPLES / "docs"], tmp_path / "index", progress=progress)
    shown = stream.getvalue()
    assert "━" in shown and "4/4" in shown and "files/s" in shown and "chunks/s" in shown
