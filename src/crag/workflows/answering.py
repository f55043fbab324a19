"""Writing the answer onto the run's event stream as it is produced (`AnswerDeltaEvent`).

A synthesizer with `stream` (a `StreamingSynthesizer`) is streamed piece by piece; any other
writes its whole answer as one delta, so that a reader of the stream always finds the answer
there. If the synthesizer fails, or answers nothing, the fallback answers instead: a delta
with `restart` voids what was streamed, and the fallback's answer follows.
"""

from __future__ import annotations

from collections.abc import Sequence

from workflows import Context

from crag.events import AnswerDeltaEvent, Source, Strip
from crag.interfaces import StreamingSynthesizer, Synthesizer
from crag.trace import StepRecord
from crag.workflows.base import describe


async def write_answer(
    ctx: Context, record: StepRecord, synthesizer: Synthesizer, query: str, strips: Sequence[Strip],
    fallback: Synthesizer | None = None,
) -> tuple[str, list[Source]]:
    """The answer and its sources, streamed as they come; `fallback` stands in for a failed
    `synthesizer` (noted in `record.degraded`); without one, the failure propagates."""
    pieces: list[str] = []
    try:
        answer, sources = await _stream(ctx, synthesizer, query, strips, pieces)
        if not answer.strip():
            raise ValueError("it returned an empty answer")
        return answer, sources
    except Exception as exc:  # any synthesizer failure has the same remedy
        if fallback is None:
            raise
        record.degrade(f"synthesizer failed ({describe(exc)}); extractive answer")
        if pieces:  # a reader has shown them: tell it to take them back
            ctx.write_event_to_stream(AnswerDeltaEvent(delta="", restart=True))
        return await _stream(ctx, fallback, query, strips, [])


async def _stream(
    ctx: Context, synthesizer: Synthesizer, query: str, strips: Sequence[Strip], pieces: list[str]
) -> tuple[str, list[Source]]:
    """The answer and its sources; each piece written to the stream and kept in `pieces`."""
    if not isinstance(synthesizer, StreamingSynthesizer):
        answer, sources = await synthesizer.synthesize(query, strips)
        if answer.strip():
            pieces.append(answer)
            ctx.write_event_to_stream(AnswerDeltaEvent(delta=answer))
        return answer, sources
    async for piece in synthesizer.stream(query, strips):
        if piece:
            pieces.append(piece)
            ctx.write_event_to_stream(AnswerDeltaEvent(delta=piece))
    answer = "".join(pieces)
    return answer, synthesizer.sources_for(answer, strips)
