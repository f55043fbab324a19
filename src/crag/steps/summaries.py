"""Document summaries: written at ingest, used at query time to pick whole documents.

At ingest (`crag ingest --summaries`), every new document gets a summary: with a model,
llama-index's own `DocumentSummaryIndex` recipe (its summary query through a tree-summarize
response synthesizer), concurrently; offline, an extractive summary (the document's most
central sentences). At query time `SummaryRetriever` ranks documents by their summaries
(WordLlama similarity, or an LLM's choice with llama-index's choice-select prompt) and
returns every chunk of the best ones.

Why not `DocumentSummaryIndex` and its retrievers at query time: building one from stored
summaries needs an LLM object even for embedding retrieval (offline there is none), its
embedding retriever returns chunks without the document's score, and its LLM retriever
calls the model synchronously, batch after batch, blocking the event loop; its answer
parser silently drops malformed output and can pair a document with another's score.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from llama_index.core.indices.document_summary.base import DEFAULT_SUMMARY_QUERY
from llama_index.core.indices.utils import default_format_node_batch_fn
from llama_index.core.llms import LLM
from llama_index.core.prompts.default_prompts import DEFAULT_CHOICE_SELECT_PROMPT
from llama_index.core.response_synthesizers import ResponseMode, get_response_synthesizer
from llama_index.core.schema import Document, NodeWithScore, TextNode

from crag.config import Settings
from crag.errors import ConfigError, IngestError, ModelReplyError, redact
from crag.index import ChunkIndex, ProgressCallback, Summarizer
from crag.models import LLMFactory, WordLlamaEmbedding
from crag.steps.bm25 import BM25
from crag.steps.retrieval import RRF_K
from crag.text import sentences, terms
from crag.trace import note_degraded

logger = logging.getLogger(__name__)

SUMMARY_SENTENCES = 3  # extractive summaries: at most this many sentences...
SUMMARY_CHARS = 600  # ...and about this many characters
SUMMARY_CONCURRENCY = 8  # documents summarized by the model at once
CHOICE_BATCH = 10  # summaries per choice-select prompt, as llama-index's LLM retriever sends
FUSION_DEPTH = 50  # per-ranking depth before fusion, as the hybrid chunk retriever's default


_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t].*$", re.MULTILINE)


def extractive_summary(
    text: str, title: str | None = None, *, max_sentences: int = SUMMARY_SENTENCES, max_chars: int = SUMMARY_CHARS
) -> str:
    """The document's most central sentences, in document order, after its title.

    A sentence is central when it holds many of the document's frequent terms (the title's
    count double: they name what the document is about). Sentences are picked greedily, a
    term counting half once a picked sentence covers it, so the summary does not repeat
    itself. Depends on the document alone: the same text always gives the same summary.
    """
    # Markdown headings would be glued to the sentence after them; the title leads anyway.
    candidates = sentences(_HEADING.sub("\n", text))
    sentence_terms = [set(terms(s)) for s in candidates]
    weight = Counter(terms(text))
    for term in set(terms(title)) if title else ():
        weight[term] *= 2
    covered: set[str] = set()
    chosen: list[int] = []
    budget = max_chars - (len(title) + 1 if title else 0)

    def gain(i: int) -> float:
        unique = sentence_terms[i]
        if not unique:
            return 0.0
        total = sum(math.log1p(weight[t]) * (0.5 if t in covered else 1.0) for t in unique)
        return total / math.sqrt(len(unique))  # favours dense sentences, not merely long ones

    while len(chosen) < max_sentences and budget > 0:
        left = [i for i in range(len(candidates)) if i not in chosen]
        if not left:
            break
        best = max(left, key=lambda i: (gain(i), -i))
        if gain(best) == 0.0 or (chosen and len(candidates[best]) > budget):
            break
        chosen.append(best)
        covered |= sentence_terms[best]
        budget -= len(candidates[best]) + 1
    body = " ".join(candidates[i] for i in sorted(chosen))
    if len(body) > max_chars:  # one very long first sentence
        body = body[:max_chars].rsplit(" ", 1)[0] + "…"
    return _titled(body, title)


def _titled(summary: str, title: str | None) -> str:
    summary = summary.strip()
    if not title or summary.lower().startswith(title.lower()):
        return summary
    return f"{title}\n{summary}" if summary else title


class ExtractiveSummarizer:
    """Offline summaries at ingest: `extractive_summary` of each document."""

    def __call__(self, documents: list[Document]) -> dict[str, str]:
        return {d.doc_id: extractive_summary(d.get_content(), d.metadata.get("title")) for d in documents}


class LLMSummarizer:
    """Summaries by a language model, with `DocumentSummaryIndex`'s summary query and its
    tree-summarize synthesizer (a long document is summarized in parts, then as a whole).

    Up to `concurrency` documents at once. A failed call raises `IngestError` before
    anything is written, so the index on disk stays as it was.
    """

    def __init__(
        self,
        llm: LLM,
        *,
        concurrency: int = SUMMARY_CONCURRENCY,
        progress: ProgressCallback | None = None,
        summary_query: str = DEFAULT_SUMMARY_QUERY,
    ) -> None:
        self.synthesizer = get_response_synthesizer(llm=llm, response_mode=ResponseMode.TREE_SUMMARIZE)
        self.concurrency = concurrency
        self.progress = progress
        self.summary_query = summary_query

    def __call__(self, documents: list[Document]) -> dict[str, str]:
        from crag.workflows.corrective import run_sync

        return run_sync(lambda: self.asummarize(documents))

    async def asummarize(self, documents: Sequence[Document]) -> dict[str, str]:
        """A summary per document id."""
        limit = asyncio.Semaphore(self.concurrency)
        done = 0
        if self.progress:
            self.progress("summarize", 0, len(documents))

        async def one(document: Document) -> tuple[str, str]:
            nonlocal done
            async with limit:
                try:
                    response = await self.synthesizer.asynthesize(
                        self.summary_query, nodes=[NodeWithScore(node=document)]
                    )
                except Exception as exc:  # noqa: BLE001 - any failure of the model call
                    raise IngestError(
                        f"Summarizing document {document.doc_id} failed "
                        f"({redact(f'{type(exc).__name__}: {exc}')[:300]}); nothing was written, "
                        "the index is as it was."
                    ) from None
            text = str(response.response or "").strip()
            if not text:
                raise IngestError(f"The model's summary of document {document.doc_id} is empty; nothing was written.")
            done += 1
            if self.progress:
                self.progress("summarize", done, len(documents))
            return document.doc_id, _titled(text, document.metadata.get("title"))

        return dict(await asyncio.gather(*(one(d) for d in documents)))


def summarizer_for(settings: Settings, progress: ProgressCallback | None = None) -> Summarizer:
    """The summarizer `crag ingest --summaries` uses: the model's when one is configured."""
    if settings.llm.configured:
        return LLMSummarizer(LLMFactory(settings.llm).llm, progress=progress)
    return ExtractiveSummarizer()


_CHOICE = re.compile(r"doc(?:ument)?\s*:?\s*(\d+)\s*[,;]?\s*relevance\s*:?\s*(\d+(?:\.\d+)?)", re.IGNORECASE)


def parse_choices(reply: str, count: int) -> list[tuple[int, float]]:
    """(position 0..count-1, relevance) pairs from a choice-select reply ("Doc: 3, Relevance: 7").

    Lines that are not choices are skipped; numbers outside 1..count are ignored.

    Raises:
        ModelReplyError: no line of the reply is a choice.
    """
    choices: dict[int, float] = {}
    for match in _CHOICE.finditer(reply):
        number, relevance = int(match.group(1)), float(match.group(2))
        if 1 <= number <= count and number - 1 not in choices:
            choices[number - 1] = relevance
    if not choices:
        raise ModelReplyError(f"The model's document choice has no 'Doc: N, Relevance: R' line: {reply[:120]!r}")
    return list(choices.items())


class SummaryRetriever:
    """Picks the documents whose summaries best match the query; returns all their chunks.

    Chunks come ordered by their document's score, then by position in the document, each
    scored with its document's score. "embedding" ranks summaries as the hybrid chunk
    retriever ranks chunks: BM25 and WordLlama similarity fused by reciprocal rank, the
    embedding weighted `vector_weight` (on the shared dev sets fusion beats the embedding
    alone by 3 to 8 points of recall@5; `vector_weight=None` uses the embedding alone, its
    cosine similarity as the score). "llm": the model's relevance / 10; it chooses among
    the `candidates` documents ranked highest, in batches of `CHOICE_BATCH`, all at once.
    A batch whose reply has no usable choice adds no document; when no batch has one, or a
    call fails, the embedding ranking stands (logged as a warning).

    Raises:
        ConfigError: the index has no summaries.
    """

    def __init__(
        self,
        index: ChunkIndex,
        embed_model: WordLlamaEmbedding | None = None,
        *,
        documents: int = 2,
        choice: Literal["embedding", "llm"] = "embedding",
        llm: LLM | None = None,
        candidates: int = 20,
        vector_weight: float | None = 0.2,
    ) -> None:
        if len(index) and not index.summaries:
            raise ConfigError(
                "Retriever kind 'summary' needs document summaries and this index has none: run "
                "`crag ingest YOUR_DOCS --summaries` (documents already indexed are summarized too)."
            )
        if choice == "llm" and llm is None:
            raise ConfigError("summary_choice 'llm' needs a model: set OPENAI_API_KEY or OPENAI_BASE_URL.")
        self.index = index
        self.embed_model = embed_model or WordLlamaEmbedding()
        self.documents = documents
        self.choice = choice
        self.llm = llm
        self.candidates = candidates
        self.vector_weight = vector_weight
        self._bm25: BM25 | None = None
        self._doc_ids: list[str] = []
        self._vectors: np.ndarray | None = None

    def _prepare(self) -> None:
        """Group chunks by document and embed the summaries, once, on first use."""
        self._positions: dict[str, list[int]] = {}
        for position, node in enumerate(self.index.nodes):
            self._positions.setdefault(node.ref_doc_id or node.node_id, []).append(position)
        summaries = self.index.summaries
        self._summaries = {}
        for doc_id, positions in self._positions.items():
            # Documents ingested before summaries were asked for: summarize their chunks here.
            self._summaries[doc_id] = summaries.get(doc_id) or extractive_summary(
                " ".join(self.index.nodes[p].get_content() for p in positions),
                self.index.nodes[positions[0]].metadata.get("title"),
            )
        self._doc_ids = list(self._summaries)
        self._vectors = self.embed_model.embed_many([self._summaries[d] for d in self._doc_ids])
        if self.vector_weight is not None:
            self._bm25 = BM25([self._summaries[d] for d in self._doc_ids])

    async def retrieve(self, query: str) -> list[NodeWithScore]:
        if not len(self.index):
            return []
        if self._vectors is None:
            self._prepare()
        ranking = self._rank(query)
        picked = ranking[: self.documents]
        if self.choice == "llm":
            try:
                shortlist = [i for i, _ in ranking[: max(self.candidates, self.documents)]]
                picked = await self._llm_choice(query, shortlist)
            except Exception as exc:  # noqa: BLE001 - any model failure: the embedding choice stands
                reason = redact(str(exc))[:200]
                logger.warning("LLM document choice failed (%s); used the embedding choice", reason)
                note_degraded(f"LLM document choice failed ({reason}); used the embedding choice")
        return [
            NodeWithScore(node=self.index.nodes[p], score=score)
            for i, score in picked
            for p in self._positions[self._doc_ids[i]]
        ]

    def _rank(self, query: str) -> list[tuple[int, float]]:
        """(document, score) pairs, best first, `candidates` deep at least."""
        similarity = self._vectors @ self.embed_model.embed_many([query])[0]
        by_embedding = [int(i) for i in np.argsort(-similarity, kind="stable")]
        if self._bm25 is None:
            return [(i, float(similarity[i])) for i in by_embedding]
        depth = max(FUSION_DEPTH, self.candidates, self.documents)
        fused: dict[int, float] = {}
        rankings = [(1.0, [i for i, _ in self._bm25.top(query, depth)]), (self.vector_weight, by_embedding[:depth])]
        for weight, ranking in rankings:
            for rank, i in enumerate(ranking):
                fused[i] = fused.get(i, 0.0) + weight / (RRF_K + rank + 1)
        return sorted(fused.items(), key=lambda pair: (-pair[1], pair[0]))

    async def _llm_choice(self, query: str, shortlist: list[int]) -> list[tuple[int, float]]:
        batches = [shortlist[start : start + CHOICE_BATCH] for start in range(0, len(shortlist), CHOICE_BATCH)]
        replies = await asyncio.gather(*(self._choose(query, batch) for batch in batches))
        scored = [(batch[k], min(relevance, 10.0) / 10.0) for batch, reply in zip(batches, replies) for k, relevance in reply]
        if not scored:
            raise ModelReplyError("no batch of summaries got a usable 'Doc: N, Relevance: R' reply")
        order = {doc: rank for rank, doc in enumerate(shortlist)}  # ties keep the embedding's order
        scored.sort(key=lambda pair: (-pair[1], order[pair[0]]))
        return scored[: self.documents]

    async def _choose(self, query: str, batch: list[int]) -> list[tuple[int, float]]:
        """The model's choices in one batch; none when its reply has no usable line (the
        prompt tells it to leave irrelevant documents out, so a batch may well have none)."""
        nodes = [TextNode(text=self._summaries[self._doc_ids[i]]) for i in batch]
        reply = await self.llm.apredict(  # type: ignore[union-attr] - set whenever choice is "llm"
            DEFAULT_CHOICE_SELECT_PROMPT, context_str=default_format_node_batch_fn(nodes), query_str=query
        )
        try:
            return parse_choices(reply, len(batch))
        except ModelReplyError:
            return []


def summary_retriever_for(
    settings: Settings, index: ChunkIndex, embed_model: WordLlamaEmbedding, llm: Callable[[], LLM]
) -> SummaryRetriever:
    """The retriever for `[retriever] kind = "summary"`; `llm()` gives the model when it is chosen."""
    retriever = settings.retriever
    choice = retriever.summary_choice
    if choice == "auto":
        choice = "llm" if settings.llm.configured else "embedding"
    return SummaryRetriever(
        index,
        embed_model,
        documents=retriever.summary_documents,
        choice=choice,
        llm=llm() if choice == "llm" else None,
        candidates=min(retriever.candidates, 20),
    )
