"""Second-stage rerankers: the retriever fetches wide (`rerank_depth`), these keep the best `top_n`.

- `LexicalReranker` (offline): the lexical evaluator's relevance, plus a little of
  WordLlama's cosine and of the first-stage rank (weights measured on the shared dev sets by
  a one-off probe: docs/measured.md, "What the one-off probes found").
- `LLMReranker`: llama-index's own `LLMRerank` (its choice-select prompt, "Doc: n, Relevance: s"),
  one call per batch of chunks, batches concurrently, with a parser that reads what models
  actually write. A batch whose reply names no document, or whose call fails, is scored by the
  offline reranker instead, and the step's trace record says so.

Both return `top_n` chunks by relevance, ties broken by first-stage rank, each `score` the
relevance in [0, 1].
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from llama_index.core.llms import LLM
from llama_index.core.postprocessor.llm_rerank import LLMRerank
from llama_index.core.schema import NodeWithScore

from crag._offload import off_loop, warm_up
from crag.errors import ConfigError, GradeParseError, redact
from crag.interfaces import Postprocessor
from crag.models import LLMFactory, WordLlamaEmbedding
from crag.steps.grading import LexicalEvaluator
from crag.trace import note_degraded

logger = logging.getLogger(__name__)

RELEVANCE_SCALE = 10.0  # the choice-select prompt asks for 1-10


def _ranked(chunks: Sequence[NodeWithScore], scores: Sequence[float], top_n: int) -> list[NodeWithScore]:
    """The `top_n` chunks by score, ties by first-stage rank, each carrying its new score."""
    order = sorted(range(len(chunks)), key=lambda i: (-scores[i], i))[:top_n]
    return [NodeWithScore(node=chunks[i].node, score=float(scores[i])) for i in order]


def _check_top_n(top_n: int) -> int:
    if top_n < 1:
        raise ConfigError(f"A reranker must keep at least one chunk; top_n is {top_n}.")
    return top_n


class LexicalReranker:
    """Offline reranker: IDF-weighted query coverage, WordLlama cosine and first-stage rank.

    score = (lexical + cosine_weight * max(cosine, 0) + rank_weight / (1 + rank)) / total weight,
    so it stays in [0, 1]. The lexical evaluator carries it (the strongest offline relevance
    signal we have); the cosine catches paraphrases, and the rank keeps what BM25 and the
    embeddings agreed on when lexical scores tie. It improves recall@5 and MRR of the gold
    passage over the first stage on every dev set (figures in docs/measured.md, "What the
    one-off probes found").

    Args:
        evaluator: the lexical evaluator built on the index's term statistics.
        embed_model: the embedding model the index was built with.
        top_n: chunks kept.
        cosine_weight, rank_weight: weights against the lexical score's 1.0.
    """

    name = "lexical_rerank"

    def __init__(
        self,
        evaluator: LexicalEvaluator,
        embed_model: WordLlamaEmbedding,
        top_n: int,
        *,
        cosine_weight: float = 0.2,
        rank_weight: float = 0.1,
    ) -> None:
        self.evaluator = evaluator
        self.embed_model = embed_model
        self.top_n = _check_top_n(top_n)
        self.cosine_weight = cosine_weight
        self.rank_weight = rank_weight

    def warm_up(self) -> None:
        warm_up(self.evaluator, self.embed_model)

    async def scores(self, query: str, chunks: Sequence[NodeWithScore], *, first_rank: int = 0) -> list[float]:
        """Relevance in [0, 1] per chunk; `first_rank` is the first chunk's first-stage rank."""
        return await off_loop(self._scores, query, chunks, first_rank)

    def _scores(self, query: str, chunks: Sequence[NodeWithScore], first_rank: int) -> list[float]:
        if not chunks:
            return []
        lexical = np.array([g.score for g in self.evaluator.grade_sync(query, chunks)])
        total = lexical.copy()
        if self.cosine_weight:
            vectors = self.embed_model.embed_many([query] + [c.node.get_content() for c in chunks])
            total += self.cosine_weight * np.clip(vectors[1:] @ vectors[0], 0.0, 1.0)
        if self.rank_weight:
            total += self.rank_weight / (1.0 + first_rank + np.arange(len(chunks)))
        return (total / (1.0 + self.cosine_weight + self.rank_weight)).round(4).tolist()

    async def postprocess(self, query: str, chunks: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        return _ranked(chunks, await self.scores(query, chunks), self.top_n)


@dataclass(frozen=True)
class Choice:
    """One document a rerank reply names: its number in the batch (from 1) and relevance (0-10)."""

    number: int
    relevance: float


_DOC = re.compile(r"\b(?:doc(?:ument)?|passage)s?\b\s*(?:number|no\.?|#)?\s*[:=#]?\s*\[?(\d{1,6})\]?", re.I)
_RELEVANCE = re.compile(
    r"relevan\w*[^\d\n]{0,16}?(\d{1,6}(?:\.\d+)?)(?:\s*(?:/|out\s+of)\s*(\d{1,6}(?:\.\d+)?))?", re.I
)
_BARE_LINE = re.compile(r"^\W*?(\d{1,6})\s*[,:=\-]\s*(\d{1,6}(?:\.\d+)?)\s*(?:/\s*(\d{1,6}))?\W*$", re.M)
_NOT_RELEVANT = re.compile(r"\b(?:not\s+relevant|irrelevant|unrelated)\b", re.I)
_NONE_RELEVANT = re.compile(
    r"\bnone\b|\bno\s+(?:relevant\s+)?(?:doc(?:ument)?s?|passages?)\b|\b(?:not|ir)\s*relevant\b", re.I
)


def parse_rerank_reply(reply: str, count: int) -> list[Choice] | None:
    """The documents a choice-select reply names, in the order named; never raises.

    Reads "Doc: 9, Relevance: 7" and what models write instead ("Doc 2, Relevance: 8",
    "Document: 3 - relevance 7/10", "3, 7", prose around the list). Numbers outside
    1..`count` are ignored; a document named twice keeps its first mention. A relevance
    given out of another scale ("7/10", "70 out of 100") is put on 0-10; one that is
    missing or off the scale takes the relevance of the document named before it (the
    prompt asks for documents in order of relevance), or 10 when it is named first;
    "not relevant" beside a document is 0.

    Returns:
        The choices, `[]` when the reply says no document is relevant, or None when it
        names no document at all (unusable).
    """
    mentions = list(_DOC.finditer(reply))
    # A document's relevance is read from the text between its number and the next document.
    ends = [m.start() for m in mentions[1:]] + [len(reply)]
    raw = [(m.group(1), _relevance(reply[m.end() : end])) for m, end in zip(mentions, ends)]
    if not raw:
        raw = [(m.group(1), _on_scale(m.group(2), m.group(3))) for m in _BARE_LINE.finditer(reply)]
    choices: list[Choice] = []
    seen: set[int] = set()
    previous = RELEVANCE_SCALE
    for number, relevance in raw:
        doc = int(number)
        if not 1 <= doc <= count or doc in seen:
            continue
        seen.add(doc)
        previous = previous if relevance is None else relevance
        choices.append(Choice(doc, previous))
    if choices:
        return choices
    return [] if _NONE_RELEVANT.search(reply) and not raw else None


def _relevance(segment: str) -> float | None:
    match = _RELEVANCE.search(segment)
    if match:
        return _on_scale(match.group(1), match.group(2))
    return 0.0 if _NOT_RELEVANT.search(segment) else None


def _on_scale(value: str, out_of: str | None) -> float | None:
    number = float(value)
    if out_of is not None:
        denominator = float(out_of)
        return min(RELEVANCE_SCALE, RELEVANCE_SCALE * number / denominator) if denominator > 0 else None
    return number if number <= RELEVANCE_SCALE else None


class LLMReranker:
    """Reranks with a chat model: llama-index's `LLMRerank`, one call per batch, batches concurrently.

    `LLMRerank` runs its batches through `run_jobs` with four workers and no way to
    change that; one failed batch fails them all, and its parser skips any line not
    shaped exactly "Doc: n, Relevance: s" (and reads "Doc: 0" as the last document). Here
    each batch is its own `LLMRerank` call with `parse_rerank_reply`, up to `concurrency`
    at once, and a batch whose reply is unusable or whose call fails is scored by
    `fallback` (its chunks keep their place among the rest by that score).

    A document the model leaves out of a usable reply is judged irrelevant (the prompt
    says to leave those out): relevance 0, still kept after the named ones by first-stage
    rank, so the grader sees `top_n` chunks.

    Args:
        llm: the chat model.
        fallback: scores a batch the model could not rank (the offline reranker).
        top_n: chunks kept.
        batch_size: chunks per prompt.
        concurrency: prompts in flight at once.
    """

    name = "llm_rerank"

    def __init__(
        self,
        llm: LLM,
        fallback: LexicalReranker,
        top_n: int,
        *,
        batch_size: int = 10,
        concurrency: int = 8,
    ) -> None:
        if batch_size < 1 or concurrency < 1:
            raise ConfigError(f"Rerank batch size ({batch_size}) and concurrency ({concurrency}) must be positive.")
        self.fallback = fallback
        self.top_n = _check_top_n(top_n)
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.reranker = LLMRerank(
            llm=llm, choice_batch_size=batch_size, top_n=batch_size, parse_choice_select_answer_fn=_parse_or_raise
        )

    def warm_up(self) -> None:
        """Load the fallback's models (the chat model connects on its first call)."""
        warm_up(self.fallback)

    async def postprocess(self, query: str, chunks: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        limit = asyncio.Semaphore(self.concurrency)
        starts = range(0, len(chunks), self.batch_size)

        async def one(start: int) -> tuple[list[float] | None, str | None]:
            batch = list(chunks[start : start + self.batch_size])
            try:
                async with limit:
                    ranked = await self.reranker.apostprocess_nodes(batch, query_str=query)
            except Exception as exc:  # noqa: BLE001 - any model failure has the same remedy
                reason = str(exc) if isinstance(exc, GradeParseError) else f"{type(exc).__name__}: {exc}"
                return None, redact(reason)[:200]
            # LLMRerank hands back the very node objects it was given, scored 0-10.
            relevance = {id(r.node): (r.score or 0.0) / RELEVANCE_SCALE for r in ranked}
            return [relevance.get(id(c.node), 0.0) for c in batch], None

        results = await asyncio.gather(*(one(start) for start in starts))
        failures = [reason for _, reason in results if reason is not None]
        offline: list[float] = []
        if failures:
            _note_degraded(
                f"{len(failures)} of {len(results)} rerank batches unusable ({failures[0]}); "
                f"scored by {self.fallback.name}"
            )
            # Scored among all the candidates, as the offline reranker would score them: the
            # evaluator's grade weighs how far a chunk leads the others graded with it.
            offline = await self.fallback.scores(query, chunks)
        scores = [
            score
            for start, (batch_scores, _) in zip(starts, results)
            for score in (batch_scores if batch_scores is not None else offline[start : start + self.batch_size])
        ]
        return _ranked(chunks, scores, self.top_n)


def _parse_or_raise(reply: str, count: int) -> tuple[list[int], list[float]]:
    """`LLMRerank`'s parser hook: numbers and relevances, or GradeParseError when unusable."""
    choices = parse_rerank_reply(reply, count)
    if choices is None:
        raise GradeParseError(f"no 'Doc: n, Relevance: s' in rerank reply {reply[:80]!r}")
    return [c.number for c in choices], [c.relevance for c in choices]


def _note_degraded(message: str) -> None:
    """Say on the running step's trace record (and the log) that a fallback stood in."""
    logger.warning("rerank: %s", message)
    note_degraded(message)


def reranker_for(
    kind: str,
    llms: LLMFactory,
    evaluator: LexicalEvaluator,
    embed_model: WordLlamaEmbedding,
    top_n: int,
    *,
    batch_size: int = 10,
    concurrency: int = 32,
) -> Postprocessor:
    """The reranker `kind` names: "llm", "lexical", or "auto" (llm when `llms` has a model).

    `batch_size` and `concurrency` are the model's: chunks per prompt, prompts in flight.
    """
    offline = LexicalReranker(evaluator, embed_model, top_n)
    if kind == "lexical" or (kind == "auto" and not llms.configured):
        return offline
    if kind not in ("llm", "auto"):
        raise ConfigError(f"postprocess.rerank is {kind!r}; expected 'auto', 'lexical' or 'llm'.")
    return LLMReranker(llms.llm, offline, top_n, batch_size=batch_size, concurrency=concurrency)
