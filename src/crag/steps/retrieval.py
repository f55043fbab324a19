"""Retrievers over a crag index: BM25, vector, and their reciprocal-rank fusion (default)."""

from __future__ import annotations

import threading

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from crag import text
from crag._offload import off_loop, warm_up
from crag.index import ChunkIndex
from crag.models import WordLlamaEmbedding

RRF_K = 60  # the constant from Cormack et al. (2009); flattens the head of each ranking


class HybridRetriever:
    """Fuses BM25 and embedding rankings by reciprocal rank (Cormack et al., 2009).

    On squad-dev, recall@5 of the gold passage: embeddings alone 81, BM25 88, fused 92.

    Args:
        index: the chunks to search.
        embed_model: embeds the query; must be the model the index was built with.
        top_k: chunks returned.
        mode: "hybrid", "vector" or "bm25".
        candidates: depth of each ranking before fusion.
        vector_weight: weight of the embedding ranking against BM25's 1.0; the static
            embeddings are weaker than BM25 on every shared dev set, so they count less.
    """

    def __init__(
        self,
        index: ChunkIndex,
        embed_model: WordLlamaEmbedding | None = None,
        *,
        top_k: int = 5,
        mode: str = "hybrid",
        candidates: int = 50,
        vector_weight: float = 0.2,
    ) -> None:
        self.index = index
        self.embed_model = embed_model or WordLlamaEmbedding()
        self.top_k = top_k
        self.mode = mode
        self.candidates = candidates
        self.vector_weight = vector_weight
        self._warm = False
        self._warming = threading.Lock()

    def warm_up(self) -> None:
        """Load the embedding model, the analyzer and the index's search structures."""
        with self._warming:  # the first searches may come from several threads at once
            if not self._warm:
                text.warm_up()
                warm_up(self.embed_model)
                warm_up(self.index)
                self._warm = True

    async def retrieve(self, query: str) -> list[NodeWithScore]:
        # BM25, the query's embedding and the vector search are all CPU or disk work.
        return await off_loop(self._retrieve, query)

    def _retrieve(self, query: str) -> list[NodeWithScore]:
        if not len(self.index):
            return []
        if not self._warm:
            self.warm_up()
        rankings: list[tuple[float, list[int]]] = []
        if self.mode in ("hybrid", "bm25"):
            rankings.append((1.0, [i for i, _ in self.index.bm25.top(query, self.candidates)]))
        if self.mode in ("hybrid", "vector"):
            hits = self.index.vector_search(self.embed_model.embed_many([query])[0], self.candidates)
            ranking = [position for position, _ in hits]
            rankings.append((self.vector_weight if self.mode == "hybrid" else 1.0, ranking))
        fused: dict[int, float] = {}
        for weight, ranking in rankings:
            for rank, position in enumerate(ranking):
                fused[position] = fused.get(position, 0.0) + weight / (RRF_K + rank + 1)
        best_positions = sorted(fused, key=lambda p: (-fused[p], p))[: self.top_k]
        return [NodeWithScore(node=self.index.nodes[p], score=fused[p]) for p in best_positions]


class LlamaIndexRetriever:
    """Adapts any llama-index `BaseRetriever` (vector stores, BM25, fusion…) to crag."""

    def __init__(self, retriever: BaseRetriever) -> None:
        self.retriever = retriever

    async def retrieve(self, query: str) -> list[NodeWithScore]:
        return await self.retriever.aretrieve(QueryBundle(query_str=query))
