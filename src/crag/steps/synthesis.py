"""Synthesizers: an extractive answer with citations (offline), or an LLM's."""

from __future__ import annotations

import re
from collections.abc import Sequence

from llama_index.core.llms import LLM, ChatMessage

from crag.events import Source, Strip
from crag.prompts import SYNTHESIZE_PROMPT
from crag.trace import Location

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
    answer adds the best sentence of each further hop.

    Args:
        max_sentences: sentences in the answer, best first, besides one per further hop.
    """

    def __init__(self, *, max_sentences: int = 3) -> None:
        self.max_sentences = max_sentences

    async def synthesize(self, query: str, strips: Sequence[Strip]) -> tuple[str, list[Source]]:
        if not strips:
            return NO_KNOWLEDGE, []
        ranked = _distinct(sorted(strips, key=lambda s: -s.score))  # stable: the first source wins ties
        # A further hop's strips were scored against its own sub-question, so they do not
        # compare with the question's: the answer is the question's best sentences and, after
        # them, the best sentence of each further hop (the fact that hop was for).
        hops = list({s.hop: s for s in reversed(ranked) if s.hop}.values())
        chosen = [s for s in ranked if not s.hop][: self.max_sentences] + sorted(hops, key=lambda s: s.hop)
        numbers, sources = number_sources(chosen)
        answer = " ".join(f"{s.text} [{numbers[s.source_id]}]" for s in chosen)
        return answer, sources


def _distinct(strips: Sequence[Strip]) -> list[Strip]:
    """The strips without repeats of a sentence, the question's own copy kept over a hop's."""
    distinct: dict[str, Strip] = {}
    for strip in sorted(strips, key=lambda s: bool(s.hop)):  # stable: keeps the given order otherwise
        distinct.setdefault(" ".join(strip.text.split()).casefold(), strip)
    kept = {id(s) for s in distinct.values()}
    return [s for s in strips if id(s) in kept]


class LLMSynthesizer:
    """Asks a chat model to answer from numbered passages and cite them as [n]."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm

    async def synthesize(self, query: str, strips: Sequence[Strip]) -> tuple[str, list[Source]]:
        if not strips:
            return NO_KNOWLEDGE, []
        numbers, sources = number_sources(strips)
        context = "\n\n".join(f"[{s.number}] {s.title or ''}\n{s.text}".strip() for s in sources)
        prompt = SYNTHESIZE_PROMPT.format(context=context, query=query)
        reply = await self.llm.achat([ChatMessage(role="user", content=prompt)])
        answer = (reply.message.content or "").strip()
        cited = {int(n) for n in re.findall(r"\[(\d+)\]", answer)}
        return answer, [s for s in sources if s.number in cited] or sources
