"""Document-summary retrieval: pick whole documents by the summaries ingest wrote.

`SummaryRetriever` ranks documents by their summaries (`crag.ingestion.summaries`)
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
import re
import threading
from typing import Literal

import numpy as np
from llama_index.core.indices.utils import default_format_node_batch_fn
from llama_index.core.llms import LLM
from llama_index.core.prompts.default_prompts import DEFAULT_CHOICE_SELECT_PROMPT
from llama_index.core.schema import NodeWithScore, TextNode

from crag import text
from crag._offload import off_loop, warm_up
from crag.errors import ConfigError, ModelReplyError, redact
from crag.index import ChunkIndex
from crag.index.lexical import BM25
from crag.ingestion.summaries import extractive_summary
from crag.models import LLMFactory, WordLlamaEmbedding
from crag.steps.retrieval import RRF_K
from crag.trace import note_degraded

logger = logging.getLogger(__name__)

CHOICE_BATCH = 10  # summaries per choice-select prompt, as llama-index's LLM retriever sends
FUSION_DEPTH = 50  # per-ranking depth before fusion, as the hybrid chunk retriever's default

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
        self._preparing = threading.Lock()

    def warm_up(self) -> None:
        """Load the models and the index, and embed the summaries, before the first question."""
        with self._preparing:  # the first questions may come from several threads at once
            if self._vectors is None:
                text.warm_up()
                warm_up(self.embed_model)
                warm_up(self.index)
                self._prepare()

    def _prepare(self) -> None:
        """Group chunks by document, embed the summaries and index them for BM25."""
        self._positions = self.index.document_positions()
        summaries = self.index.summaries
        self._summaries = {}
        for doc_id, positions in self._positions.items():
            # Documents ingested before summaries were asked for: summarize their chunks here.
            self._summaries[doc_id] = summaries.get(doc_id) or extractive_summary(
                " ".join(self.index.nodes[p].get_content() for p in positions),
                self.index.nodes[positions[0]].metadata.get("title"),
            )
        self._doc_ids = list(self._summaries)
        if self.vector_weight is not None:
            self._bm25 = BM25([self._summaries[d] for d in self._doc_ids])
        # Last: a search that finds the vectors set finds everything else ready.
        self._vectors = self.embed_model.embed_many([self._summaries[d] for d in self._doc_ids])

    async def retrieve(self, query: str) -> list[NodeWithScore]:
        if not len(self.index):
            return []
        ranking = await off_loop(self._rank, query)
        picked = ranking[: self.documents]
        if self.choice == "llm":
            try:
                shortlist = [i for i, _ in ranking[: max(self.candidates, self.documents)]]
                picked = await self._llm_choice(query, shortlist)
            except Exception as exc:  # noqa: BLE001 - any model failure: the embedding choice stands
                reason = redact(str(exc))[:200]
                logger.warning("LLM document choice failed (%s); used the embedding choice", reason)
                note_degraded(f"LLM document choice failed ({reason}); used the embedding choice")
        return await off_loop(self._chunks, picked)

    def _chunks(self, picked: list[tuple[int, float]]) -> list[NodeWithScore]:
        """Every chunk of the picked documents (the index may read them from disk)."""
        return [
            NodeWithScore(node=self.index.nodes[p], score=score)
            for i, score in picked
            for p in self._positions[self._doc_ids[i]]
        ]

    def _rank(self, query: str) -> list[tuple[int, float]]:
        """(document, score) pairs, best first, `candidates` deep at least."""
        if self._vectors is None:
            self.warm_up()
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
    index: ChunkIndex,
    embed_model: WordLlamaEmbedding,
    llms: LLMFactory,
    *,
    documents: int = 2,
    choice: Literal["auto", "embedding", "llm"] = "auto",
    candidates: int = 50,
) -> SummaryRetriever:
    """The retriever for `[retriever] kind = "summary"`: `choice` "auto" picks documents by
    `llms`'s model when one is configured, else by embeddings; `candidates` is capped at 20."""
    if choice == "auto":
        choice = "llm" if llms.configured else "embedding"
    return SummaryRetriever(
        index,
        embed_model,
        documents=documents,
        choice=choice,
        llm=llms.llm if choice == "llm" else None,
        candidates=min(candidates, 20),
    )
