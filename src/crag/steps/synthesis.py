"""Synthesizers: an extractive answer with citations (offline), or an LLM's."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence

from llama_index.core.llms import LLM, ChatMessage

from crag.events import Source, Strip
from crag.models.replies import finish_reason, limits
from crag.prompts import SYNTHESIZE_PROMPT
from crag.steps.answer_kinds import asked_kind, holds_kind
from crag.steps.refining import ranking
from crag.trace import Location, note_degraded

NO_KNOWLEDGE = "I found no relevant information to answer this question."


def number_sources(strips: Sequence[Strip]) -> tuple[dict[str, int], list[Source]]:
    """Number each distinct source once, in the order strips first mention it."""
    numbers: dict[str, int] = {}
    sources: list[Source] = []
    for strip in strips:
        if strip.source_id not in numbers:
            numbers[strip.source_id] = len(numbers) + 1
            sources.append(
                Source(
                    number=numbers[strip.source_id],
                    kind=strip.kind,
                    id=strip.source_id,
                    text="",
                    doc_id=strip.doc_id,
                    title=strip.title,
                    url=strip.url,
                    **strip.model_dump(include=set(Location.model_fields)),
                )
            )
    for source in sources:
        source.text = " ".join(s.text for s in strips if s.source_id == source.id)
    return numbers, sources


class ExtractiveSynthesizer:
    """Answers with the best-supported sentences, each followed by its source number.

    A sentence met twice (the same passage found in the documents and on the web) is
    used once, so a repeat never takes the place of another sentence. A multi-hop run's
    answer adds the best sentence of each further hop: first where it answers what the hop
    asked of a bridge, after the question's best sentences otherwise.

    Of the question's sentences that the grader scores alike, one that names the kind of thing
    the question asks for (`answering_first`) comes first.

    The answer is short: its first sentence and each further hop's best always, then the next
    best that fit in `max_chars` (a shorter one may take the place of one that does not fit),
    so that a person reads the answer, not a page.

    Args:
        max_sentences: sentences in the answer, best first, besides one per further hop.
        max_chars: characters the answer runs to, citations included, unless its first
            sentence and its further hops' best are longer; None sets no bound.
    """

    def __init__(self, *, max_sentences: int = 3, max_chars: int | None = 300) -> None:
        self.max_sentences = max_sentences
        self.max_chars = max_chars

    async def synthesize(self, query: str, strips: Sequence[Strip]) -> tuple[str, list[Source]]:
        answer = " ".join(self._sentences(query, strips))
        return answer, self.sources_for(answer, strips)

    async def stream(self, query: str, strips: Sequence[Strip]) -> AsyncIterator[str]:
        """The answer a sentence at a time, each with its citation (the first without a space)."""
        for n, sentence in enumerate(self._sentences(query, strips)):
            yield sentence if n == 0 else " " + sentence

    def sources_for(self, answer: str, strips: Sequence[Strip]) -> list[Source]:
        """The sources of the strips `answer` quotes, numbered in the order it quotes them."""
        quoted = [(answer.find(f"{s.text} ["), s) for s in _distinct(sorted(strips, key=ranking))]
        return number_sources([s for at, s in sorted(quoted, key=lambda q: q[0]) if at >= 0])[1]

    def _sentences(self, query: str, strips: Sequence[Strip]) -> list[str]:
        if not strips:
            return [NO_KNOWLEDGE]
        chosen = self._chosen(query, strips)
        numbers, _ = number_sources(chosen)
        return [f"{s.text} [{numbers[s.source_id]}]" for s in chosen]

    def _chosen(self, query: str, strips: Sequence[Strip]) -> list[Strip]:
        ranked = answering_first(query, sorted(strips, key=ranking))  # stable: the first source wins ties
        # A further hop's strips were scored against its own sub-question, so they do not
        # compare with the question's: the answer has the best sentence of each further hop,
        # first where it answers what the hop asked of a bridge (the answer to a bridge question),
        # else after the question's best sentences.
        hops = sorted({s.hop for s in ranked if s.hop})
        lead = _distinct([s for hop in hops for s in [next((s for s in ranked if s.hop == hop and s.leads), None)] if s])
        led = {s.hop for s in lead}
        chosen = lead + _distinct(lead + [s for s in ranked if not s.hop])[len(lead):][: self.max_sentences]
        for hop in hops:
            if hop not in led:  # its best sentence that the answer does not have yet
                said = {_said(s) for s in chosen}
                chosen += [s for s in ranked if s.hop == hop and _said(s) not in said][:1]
        return self._within_length(chosen)

    def _within_length(self, chosen: list[Strip]) -> list[Strip]:
        """The first strip and each further hop's best (what the question asked of that hop: a
        two-part question gets both parts), then each other that still fits in `max_chars`
        (with its citation)."""
        if self.max_chars is None:
            return chosen
        hops = {chosen[0].hop} if chosen else set()
        kept = chosen[:1]
        for strip in chosen[1:]:
            if strip.hop not in hops:
                hops.add(strip.hop)
                kept.append(strip)
        length = sum(len(s.text) + _CITED + 1 for s in kept) - 1
        for strip in chosen:
            if all(strip is not k for k in kept) and length + 1 + len(strip.text) + _CITED <= self.max_chars:
                kept.append(strip)
                length += 1 + len(strip.text) + _CITED
        return [s for s in chosen if any(s is k for k in kept)]


def answering_first(query: str, ranked: list[Strip]) -> list[Strip]:
    """`ranked` with the question's strips that score within `NEAR` of its best reordered: those
    naming the kind of thing the question asks for ("when": a year, "how many": a number, "who":
    a name the question does not have) first, so that the answer opens with the sentence that
    answers rather than one that restates the question. The grader's score measures the
    question's terms alone, so it cannot tell these apart."""
    kind = asked_kind(query)
    asked = [s for s in ranked if not s.hop]
    if kind is None or not asked:
        return ranked
    near = [s for s in asked if s.score >= asked[0].score - NEAR]
    first = [s for s in near if holds_kind(s.text, kind, query)]
    return first + [s for s in ranked if all(s is not f for f in first)]


NEAR = 0.05  # scores this close differ by a question term or two of little weight: a tie for the grader
_CITED = len(" [1]")  # what a sentence's citation adds to the answer


def _distinct(strips: Sequence[Strip]) -> list[Strip]:
    """The strips without repeats of a sentence (the same passage found in the documents and
    on the web, or by two hops), the first copy kept."""
    distinct: dict[str, Strip] = {}
    for strip in strips:
        distinct.setdefault(_said(strip), strip)
    return list(distinct.values())


def _said(strip: Strip) -> str:
    """What a strip says, whatever its spacing and case."""
    return " ".join(strip.text.split()).casefold()


class LLMSynthesizer:
    """Asks a chat model to answer from numbered passages and cite them as [n], in at most
    `max_tokens`; an answer cut at that limit is kept (it is still an answer), and the run's
    `degraded` list says it was cut."""

    def __init__(self, llm: LLM, *, max_tokens: int | None = 512) -> None:
        self.llm = llm
        self.max_tokens = max_tokens

    async def synthesize(self, query: str, strips: Sequence[Strip]) -> tuple[str, list[Source]]:
        if not strips:
            return NO_KNOWLEDGE, []
        reply = await self.llm.achat(_prompt(query, strips), **limits(self.max_tokens))
        self._note_cut(reply)
        answer = (reply.message.content or "").strip()
        return answer, self.sources_for(answer, strips)

    def _note_cut(self, reply: object) -> None:
        if finish_reason(reply) == "length":
            note_degraded(f"the answer was cut at its {self.max_tokens}-token limit")

    async def stream(self, query: str, strips: Sequence[Strip]) -> AsyncIterator[str]:
        """The model's answer as its tokens arrive (`astream_chat`), leading whitespace dropped
        so that the joined pieces are the answer `synthesize` would give."""
        if not strips:
            yield NO_KNOWLEDGE
            return
        started = False
        async for chunk in await self.llm.astream_chat(_prompt(query, strips), **limits(self.max_tokens)):
            self._note_cut(chunk)
            delta = chunk.delta or ""
            if not started:
                delta = delta.lstrip()
                started = bool(delta)
            if delta:
                yield delta

    def sources_for(self, answer: str, strips: Sequence[Strip]) -> list[Source]:
        """The sources `answer` cites; all of them when it cites none."""
        if not strips:
            return []
        sources = number_sources(strips)[1]
        cited = {int(n) for n in re.findall(r"\[(\d+)\]", answer)}
        return [s for s in sources if s.number in cited] or sources


def _prompt(query: str, strips: Sequence[Strip]) -> list[ChatMessage]:
    _, sources = number_sources(strips)
    context = "\n\n".join(f"[{s.number}] {s.title or ''}\n{s.text}".strip() for s in sources)
    return [ChatMessage(role="user", content=SYNTHESIZE_PROMPT.format(context=context, query=query))]
