"""Agentic chunking: documents cut into propositions, each put in the chunk of its topic.

With a chat model, three prompts do the work: a passage into propositions (a JSON list),
each proposition into an existing chunk (chosen by id from every chunk's title and summary)
or a new one, and a fresh title and summary for the chunk that changed. Offline
(`crag.ingestion.chunkers.propositions`), a proposition is a sentence (optionally with a
leading pronoun resolved); it joins the chunk whose WordLlama centroid is most similar, when at
least `threshold` similar and the chunk has room, else starts a new chunk; a title is the
chunk's top IDF-weighted keywords and its summary the proposition closest to the centroid.

Chunks never cross documents, and a chunk's propositions keep their document order. The
title and summary are metadata (`chunk_title`, `chunk_summary`), not text: crag embeds and
BM25-indexes a chunk's text alone, and both are made of the chunk's own words, so adding them
would count those words twice; the refiner would also cut a title line into a strip of its own.
The document's `title` is left as it is: the grader reads it as the entity a passage is about.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from llama_index.core.llms import LLM, ChatMessage
from llama_index.core.node_parser import NodeParser, SentenceSplitter
from llama_index.core.node_parser.node_utils import build_nodes_from_splits
from llama_index.core.output_parsers.base import OutputParserException
from llama_index.core.output_parsers.utils import parse_json_markdown
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.utils import get_tokenizer
from pydantic import Field

from crag.errors import ModelReplyError
from crag.ingestion.chunkers.propositions import (
    central,
    group_by_centroid,
    keyword_title,
    offline_propositions,
)
from crag.models import LLMFactory, WordLlamaEmbedding
from crag.text import TermStats

logger = logging.getLogger(__name__)
T = TypeVar("T")

META_KEYS = ("chunk_title", "chunk_summary", "chunker_note")

PROPOSITIONS_PROMPT = PromptTemplate(
    "Decompose the passage into propositions: short statements of one fact each, in the "
    "passage's order, each understandable alone (replace pronouns with the names they stand for).\n"
    "Document: {title}\n"
    "Passage:\n{passage}\n\n"
    'Reply with a JSON list of strings only, like ["The H10 weighs 98 kg.", "..."].'
)
ASSIGN_PROMPT = PromptTemplate(
    "You group propositions into chunks, one topic per chunk.\n"
    "Chunks so far (id: title: summary):\n{chunks}\n\n"
    "Proposition: {proposition}\n\n"
    "Reply with the id of the chunk whose topic the proposition belongs to, like c1, "
    "or with new if none fits. Reply with the id or new only."
)
UPDATE_PROMPT = PromptTemplate(
    "These propositions form one chunk of a document:\n{propositions}\n\n"
    "Give the chunk a title of a few words and a one-sentence summary. "
    'Reply with JSON only: {{"title": "...", "summary": "..."}}'
)


# --- replies from a chat model -------------------------------------------------------------


def parse_propositions(reply: str) -> list[str]:
    """A JSON list of strings from `reply` (bare or in a ```json block); ModelReplyError if not."""
    try:
        value = parse_json_markdown(reply)
    except (OutputParserException, ValueError, ImportError):
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ModelReplyError(f"not a JSON list of propositions: {reply[:80]!r}")
    propositions = [v.strip() for v in value if v.strip()]
    if not propositions:
        raise ModelReplyError(f"no propositions in reply {reply[:80]!r}")
    return propositions


_CHOICE = re.compile(r"\b(?:c(\d+)|(new))\b", re.IGNORECASE)


def parse_choice(reply: str, chunks: int) -> int | None:
    """The chunk index `reply` names ("c2" is index 1), or None for "new"; ModelReplyError if neither."""
    match = _CHOICE.search(reply)
    if not match:
        raise ModelReplyError(f"no chunk id or 'new' in reply {reply[:80]!r}")
    if match.group(2):
        return None
    number = int(match.group(1))
    if not 1 <= number <= chunks:
        raise ModelReplyError(f"chunk c{number} does not exist (c1-c{chunks}) in reply {reply[:80]!r}")
    return number - 1


def parse_title_summary(reply: str) -> tuple[str, str]:
    """`{"title": ..., "summary": ...}` from `reply`; ModelReplyError if not."""
    try:
        value = parse_json_markdown(reply)
    except (OutputParserException, ValueError, ImportError):
        value = None
    if not isinstance(value, dict) or not all(isinstance(value.get(k), str) and value[k].strip()
                                              for k in ("title", "summary")):
        raise ModelReplyError(f"not a JSON object with a title and a summary: {reply[:80]!r}")
    return value["title"].strip(), value["summary"].strip()


# --- the node parser -----------------------------------------------------------------------


@dataclass
class _Chunk:
    members: list[int] = field(default_factory=list)  # proposition numbers, in order
    title: str = ""
    summary: str = ""


@dataclass
class _Grouped:
    propositions: list[str]
    chunks: list[_Chunk]
    notes: list[str] = field(default_factory=list)


class AgenticChunker(NodeParser):
    """Propositions grouped into titled, summarised chunks: by prompts when `llm` is set, else
    by WordLlama centroids (see the module's docstring).

    A model reply that cannot be used (a malformed list, an unknown chunk id, a failed call)
    does not stop the ingest: that passage, choice or title falls back to the offline method,
    a warning is logged, and the document's chunks say so in `chunker_note`.
    """

    threshold: float = Field(0.2, description="Cosine to a chunk's centroid needed to join it.")
    max_tokens: int = Field(256, gt=0, description="Most tokens in a chunk.")
    resolve_pronouns: bool = Field(True, description="Offline: resolve a sentence's leading pronoun.")
    llm: LLM | None = Field(None, exclude=True, description="Chat model; None works offline.")
    concurrency: int = Field(8, gt=0, description="Documents chunked at once with an LLM.")
    passage_tokens: int = Field(512, gt=32, description="Tokens per passage sent for propositions.")
    embed_model: WordLlamaEmbedding = Field(default_factory=WordLlamaEmbedding, exclude=True)
    progress: Callable[[str, int, int], None] | None = Field(
        None, exclude=True, description="`progress('chunk', done, total)` per document, as `crag.ingest` reports."
    )

    def _parse_nodes(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> list[BaseNode]:
        if self.llm is not None:
            from crag._offload import run_sync

            return run_sync(lambda: self._aparse_nodes(nodes))
        docs = [n for n in nodes if n.get_content().strip()]
        props = [offline_propositions(n.get_content(), n.metadata.get("title"), resolve=self.resolve_pronouns)
                 for n in docs]
        vectors = self.embed_model.embed_many([p for ps in props for p in ps])
        stats = TermStats.from_texts(p for ps in props for p in ps)
        out: list[BaseNode] = []
        start = 0
        self._report(0, len(docs))
        for done, (doc, ps) in enumerate(zip(docs, props), start=1):
            vecs, start = vectors[start : start + len(ps)], start + len(ps)
            groups = group_by_centroid(vecs, self._sizes(ps), self.threshold, self.max_tokens)
            chunks = [_Chunk(g, keyword_title([ps[i] for i in g], stats), central([ps[i] for i in g], vecs[g]))
                      for g in groups]
            out.extend(self._nodes(doc, _Grouped(ps, chunks)))
            self._report(done, len(docs))
        return out

    async def _aparse_nodes(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> list[BaseNode]:
        if self.llm is None:
            return self._parse_nodes(nodes)
        limit = asyncio.Semaphore(self.concurrency)
        docs = [n for n in nodes if n.get_content().strip()]
        finished = 0
        self._report(0, len(docs))

        async def one(doc: BaseNode) -> list[TextNode]:
            nonlocal finished
            async with limit:
                chunks = self._nodes(doc, await self._group_with_llm(doc))
            finished += 1
            self._report(finished, len(docs))
            return chunks

        done = await asyncio.gather(*(one(d) for d in docs))
        return [node for nodes_of_doc in done for node in nodes_of_doc]

    def _report(self, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress("chunk", done, total)

    def _sizes(self, texts: Sequence[str]) -> list[int]:
        tokenize = get_tokenizer()
        return [len(tokenize(t)) for t in texts]

    def _nodes(self, doc: BaseNode, grouped: _Grouped) -> list[TextNode]:
        texts = [" ".join(grouped.propositions[i] for i in c.members) for c in grouped.chunks]
        nodes = build_nodes_from_splits(texts, doc, id_func=self.id_func)
        for node, chunk in zip(nodes, grouped.chunks):
            node.metadata.update(chunk_title=chunk.title, chunk_summary=chunk.summary)
            if grouped.notes:
                node.metadata["chunker_note"] = "; ".join(dict.fromkeys(grouped.notes))
            node.excluded_embed_metadata_keys = [*node.excluded_embed_metadata_keys, *META_KEYS]
            node.excluded_llm_metadata_keys = [*node.excluded_llm_metadata_keys, *META_KEYS]
        return nodes

    # -- with a chat model --

    async def _ask(self, prompt: str) -> str:
        assert self.llm is not None
        reply = await self.llm.achat([ChatMessage(role="user", content=prompt)])
        return reply.message.content or ""

    async def _group_with_llm(self, doc: BaseNode) -> _Grouped:
        title = str(doc.metadata.get("title") or "")
        grouped = _Grouped([], [])
        passages = SentenceSplitter(chunk_size=self.passage_tokens, chunk_overlap=0).split_text(doc.get_content())
        for passage in passages:
            grouped.propositions.extend(await self._propositions(passage, title, grouped.notes))
        props = grouped.propositions
        vectors = self.embed_model.embed_many(props)
        sizes = self._sizes(props)
        stats = TermStats.from_texts(props)
        for i in range(len(props)):
            target = await self._choose(grouped, i, vectors, sizes)
            if target is None:
                grouped.chunks.append(_Chunk())
                target = grouped.chunks[-1]
            target.members.append(i)
            target.title, target.summary = await self._describe(target, props, vectors, stats, grouped.notes)
        return grouped

    async def _asked(self, prompt: str, read: Callable[[str], T], notes: list[str], what: str,
                     offline: Callable[[], T]) -> T:
        """`read` of the model's reply to `prompt`, or, when the call or the reading fails in any
        way, `offline()`, noted in `notes` ("LLM `what` unusable")."""
        try:
            return read(await self._ask(prompt))
        except Exception as exc:  # noqa: BLE001 - any model failure: the offline method, here only
            return _noted(notes, what, exc, offline())

    async def _propositions(self, passage: str, title: str, notes: list[str]) -> list[str]:
        return await self._asked(
            PROPOSITIONS_PROMPT.format(title=title, passage=passage), parse_propositions, notes,
            "propositions",
            lambda: offline_propositions(passage, title, resolve=self.resolve_pronouns),
        )

    async def _choose(self, grouped: _Grouped, i: int, vectors: np.ndarray, sizes: list[int]) -> _Chunk | None:
        """The chunk proposition `i` joins, or None for a new one."""
        chunks = grouped.chunks
        if not chunks:
            return None
        outline = "\n".join(f"c{n}: {c.title}: {c.summary}" for n, c in enumerate(chunks, start=1))
        proposition = grouped.propositions[i]

        def read(reply: str) -> _Chunk | None:
            choice = parse_choice(reply, len(chunks))
            return None if choice is None else chunks[choice]

        def nearest() -> _Chunk | None:  # by the centroids
            sums = np.stack([vectors[c.members].sum(axis=0) for c in chunks])
            sims = sums @ vectors[i] / np.maximum(np.linalg.norm(sums, axis=1), 1e-12)
            best = int(np.argmax(sims))
            return chunks[best] if sims[best] >= self.threshold else None

        prompt = ASSIGN_PROMPT.format(chunks=outline, proposition=proposition)
        chosen = await self._asked(prompt, read, grouped.notes, "assignment", nearest)
        if chosen is not None and sum(sizes[m] for m in chosen.members) + sizes[i] > self.max_tokens:
            return None  # a full chunk takes no more, whatever the model chose
        return chosen

    async def _describe(
        self, chunk: _Chunk, props: list[str], vectors: np.ndarray, stats: TermStats, notes: list[str]
    ) -> tuple[str, str]:
        members = [props[m] for m in chunk.members]
        listed = "\n".join(f"- {p}" for p in members)
        return await self._asked(
            UPDATE_PROMPT.format(propositions=listed), parse_title_summary, notes, "title",
            lambda: (keyword_title(members, stats), central(members, vectors[chunk.members])),
        )


def _noted(notes: list[str], what: str, exc: Exception, fallback: Any) -> Any:
    reason = str(exc) if isinstance(exc, ModelReplyError) else type(exc).__name__
    note = f"LLM {what} unusable ({reason}); used the offline method"
    logger.warning("agentic chunking: %s", note)
    notes.append(f"LLM {what} unusable; used the offline method")
    return fallback


def agentic_chunker(
    *, threshold: float = 0.2, max_tokens: int = 256, resolve_pronouns: bool = True, llms: LLMFactory | None = None
) -> tuple[AgenticChunker, str]:
    """An agentic chunker, and its signature for the index's manifest: by prompts when `llms`
    has a model configured, else offline (`resolve_pronouns` applies offline only)."""
    common = dict(threshold=threshold, max_tokens=max_tokens)
    if llms is not None and llms.configured:
        parser = AgenticChunker(llm=llms.llm, **common)
        return parser, f"agentic:llm:{llms.options.model}:{threshold}:{max_tokens}"
    parser = AgenticChunker(resolve_pronouns=resolve_pronouns, **common)
    pronouns = "pronouns" if resolve_pronouns else "plain"
    return parser, f"agentic:offline:{threshold}:{max_tokens}:{pronouns}"
