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
from crag.trace import StepRecord, or_fallback


async def write_answer(
    ctx: Context, record: StepRecord, synthesizer: Synthesizer, query: str, strips: Sequence[Strip],
    fallback: Synthesizer | None = None,
) -> tuple[str, list[Source]]:
    """The answer and its sources, streamed as they come; `fallback` stands in for a failed
    `synthesizer` (noted in `record.degraded`); without one, the failure propagates."""
    pieces: list[str] = []

    async def attempt() -> tuple[str, list[Source]]:
        answer, sources = await _stream(ctx, synthesizer, query, strips, pieces)
        if not answer.strip():
            raise ValueError("it returned an empty answer")
        return answer, sources

    if fallback is None:
        return await attempt()
    stand_in = fallback

    async def instead() -> tuple[str, list[Source]]:
        if pieces:  # a reader has shown them: tell it to take them back
            ctx.write_event_to_stream(AnswerDeltaEvent(delta="", restart=True))
        return await _stream(ctx, stand_in, query, strips, [])

    return await or_fallback(record, "synthesizer", "extractive answer", attempt, instead)


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
