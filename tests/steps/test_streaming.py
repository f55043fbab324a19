"""The answer on the event stream as it is written (`AnswerDeltaEvent`): order and content,
never timing."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from crag import CragResult, Settings, build_workflow
from crag.app.cli import main
from crag.app.progress import AnswerPrinter
from crag.events import AnswerDeltaEvent, StepProgressEvent, Strip
from crag.interfaces import StreamingSynthesizer, Synthesizer
from crag.steps.synthesis import ExtractiveSynthesizer, LLMSynthesizer
from crag.testing import FakeLLM

QUESTION = "What warranty does Lumen give on the Helio H10?"


async def deltas_of(workflow, query: str = QUESTION) -> tuple[list[AnswerDeltaEvent], list[str], CragResult]:
    """The run's deltas, the order its events came in (deltas as "delta"), and its result."""
    handler = workflow.run(query=query)
    deltas: list[AnswerDeltaEvent] = []
    order: list[str] = []
    async for event in handler.stream_events():
        if isinstance(event, AnswerDeltaEvent):
            deltas.append(event)
            order.append("delta")
        elif isinstance(event, StepProgressEvent):
            order.append(f"{event.step} {event.status}")
    return deltas, order, await handler


def test_both_synthesizers_stream_and_stay_synthesizers() -> None:
    for synthesizer in (ExtractiveSynthesizer(), LLMSynthesizer(FakeLLM())):
        assert isinstance(synthesizer, Synthesizer) and isinstance(synthesizer, StreamingSynthesizer)


async def test_the_extractive_answer_streams_a_sentence_at_a_time_with_its_citation(sample_settings: Settings) -> None:
    deltas, order, result = await deltas_of(build_workflow(sample_settings))
    assert len(deltas) >= 2 and not any(d.restart for d in deltas)
    assert "".join(d.delta for d in deltas) == result.answer
    assert all(d.delta.rstrip().endswith("]") for d in deltas)  # each sentence carries its [n]
    assert "12-year warranty" in result.answer and result.sources
    # Between the synthesize step's start and its end.
    first, last = order.index("delta"), len(order) - 1 - order[::-1].index("delta")
    assert order.index("synthesize started") < first and last < order.index("synthesize finished")


async def test_the_model_answer_streams_token_by_token(sample_settings: Settings) -> None:
    llm = FakeLLM(reply=lambda prompt: "Lumen gives a 12-year warranty on the Helio H10 [1].")
    workflow = build_workflow(sample_settings)
    workflow.synthesizer = LLMSynthesizer(llm)
    deltas, _, result = await deltas_of(workflow)
    assert [d.delta for d in deltas] == ["Lumen", " gives", " a", " 12-year", " warranty", " on", " the",
                                         " Helio", " H10", " [1]."]
    assert result.answer == "Lumen gives a 12-year warranty on the Helio H10 [1]."
    assert [s.number for s in result.sources] == [1] and not result.degraded
    assert result.trace.steps[-1].llm_calls == 1  # the streamed call is counted as one


class _BreaksMidway(LLMSynthesizer):
    """Streams two pieces, then the model goes away."""

    async def stream(self, query: str, strips: Sequence[Strip]) -> AsyncIterator[str]:
        yield "Lumen"
        yield " gives"
        raise ConnectionError("the model went away")


async def test_a_model_failing_mid_stream_restarts_with_the_extractive_answer(sample_settings: Settings) -> None:
    workflow = build_workflow(sample_settings)
    workflow.synthesizer = _BreaksMidway(FakeLLM())
    deltas, _, result = await deltas_of(workflow)
    assert [d.delta for d in deltas[:2]] == ["Lumen", " gives"] and deltas[2].restart
    assert "".join(d.delta for d in deltas[3:]) == result.answer
    assert "12-year warranty" in result.answer
    assert any("synthesizer failed (ConnectionError: the model went away)" in d for d in result.degraded)


class _Whole:
    """A synthesizer without `stream`: its answer is one delta."""

    async def synthesize(self, query: str, strips: Sequence[Strip]) -> tuple[str, list]:
        return "All at once.", []


async def test_a_synthesizer_that_cannot_stream_writes_its_answer_as_one_delta(sample_settings: Settings) -> None:
    workflow = build_workflow(sample_settings)
    workflow.synthesizer = _Whole()
    deltas, _, result = await deltas_of(workflow)
    assert [d.delta for d in deltas] == ["All at once."] == [result.answer]


def test_crag_ask_stream_prints_the_answer_once_then_the_rest(
    capsys: pytest.CaptureFixture[str], sample_index_dir: Path
) -> None:
    argv = ["ask", QUESTION, "--index", str(sample_index_dir)]
    assert main([*argv, "--stream"]) == 0
    captured = capsys.readouterr()
    assert main([*argv, "--json", "--quiet"]) == 0  # --json: one object, never streamed
    answer = json.loads(capsys.readouterr().out)["answer"]
    out = captured.out
    assert out.startswith(answer + "\n") and out.count(answer) == 1
    assert "verdict: correct" in out and "[1] internal" in out
    # No progress line was written in the middle of the answer.
    assert "crag: synthesize finished" in captured.err


def test_answer_printer_says_a_restart_and_starts_a_fresh_line() -> None:
    out, err = io.StringIO(), io.StringIO()
    printer = AnswerPrinter(out, err)
    for event in (AnswerDeltaEvent(delta="Lumen"), AnswerDeltaEvent(delta=" gi"),
                  AnswerDeltaEvent(delta="", restart=True), AnswerDeltaEvent(delta="Whole [1]")):
        printer(event)
    printer.end()
    assert out.getvalue() == "Lumen gi\nWhole [1]\n"
    assert "failed mid-answer" in err.getvalue()
