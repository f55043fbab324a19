"""New chunks, cut and embedded a batch of documents at a time.

An ingest held every document of every file, then cut them all, then embedded them all: a
100,000-passage corpus (60 MB) took the ingest's process to 1,653 MB. Documents are now cut,
embedded and analyzed as `BATCH_CHARS` of their text gather, and let go; what stays of them is
each chunk (its node, on disk: `crag.ingestion.spilled`), its vector (float32) and its terms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from llama_index.core.node_parser import NodeParser
from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.index.lexical import ChunkTerms
from crag.ingestion.chunk_metadata import HIDDEN_KEYS
from crag.ingestion.spilled import SpilledNodes
from crag.models import WordLlamaEmbedding
from crag.text import SPANS_KEY, sentence_spans

BATCH_CHARS = 2_000_000
"""Characters of documents held before they are cut and embedded: about 2,000 chunks, a few MB."""
EMBED_BATCH = 256  # texts given to the model at once


class SummaryFailed(IngestError):
    """The summarizer failed: the ingest fails (not the file being read when the batch filled)."""


@dataclass(frozen=True)
class Mark:
    """Where the new chunks stood before a file was added: `NewChunks.drop_since` goes back to it."""

    nodes: int
    documents: int


class NewChunks:
    """The chunks of the documents added, in order, with their vectors and terms.

    `nodes` keeps the chunks as they are cut; `terms()` gives the index's own chunks' terms, which the new ones follow (read when the
    first batch is cut); `summarize` (the ingest's summarizer) writes each new document's
    summary as its batch is cut.
    """

    def __init__(self, node_parser: NodeParser, embed_model: Callable[[], WordLlamaEmbedding],
                 terms: Callable[[], ChunkTerms], nodes: SpilledNodes,
                 progress: Callable[[str, int, int], None] | None = None,
                 summarize: Callable[[list[Document]], dict[str, str]] | None = None) -> None:
        self.node_parser, self.progress, self.summarize = node_parser, progress, summarize
        self._model_factory = embed_model
        self._model: WordLlamaEmbedding | None = None
        self.nodes = nodes  # on disk as they are cut: a node in memory costs 3 to 10 KB
        self.summaries: dict[str, str] = {}
        self._terms_factory = terms
        self._terms: ChunkTerms | None = None
        self._earlier = 0  # rows of the terms that are the index's own chunks
        self._vectors: list[np.ndarray] = []
        self._doc_ids: list[str] = []  # of every document added, in order
        self._pending: list[Document] = []
        self._pending_chars = 0

    @property
    def doc_ids(self) -> set[str]:
        return set(self._doc_ids)

    def mark(self) -> Mark:
        """Where the chunks stand, the documents held cut first: what is added after it can be dropped."""
        self.flush()
        return Mark(len(self.nodes), len(self._doc_ids))

    def add(self, documents: Iterable[Document]) -> int:
        """Add `documents` (those with text), cutting and embedding each batch as it fills; how many were added."""
        added = 0
        for document in documents:
            if not document.text.strip():
                continue
            self._pending.append(document)
            self._doc_ids.append(document.doc_id)
            self._pending_chars += len(document.text)
            added += 1
            if self._pending_chars >= BATCH_CHARS:
                self.flush()
        return added

    @property
    def terms(self) -> ChunkTerms:
        """The index's own chunks' terms, then the new chunks'."""
        if self._terms is None:
            self._terms = self._terms_factory()
            self._earlier = len(self._terms)
        return self._terms

    def drop_since(self, mark: Mark) -> None:
        """Forget what was added after `mark` (a file that failed as it was read)."""
        self._pending, self._pending_chars = [], 0
        if len(self.nodes) > mark.nodes:
            self.nodes.truncate(mark.nodes)
            self._vectors = [self.vectors()[: mark.nodes]]
            self._terms = self.terms.select(np.arange(self._earlier + mark.nodes))
        for doc_id in self._doc_ids[mark.documents:]:
            self.summaries.pop(doc_id, None)
        del self._doc_ids[mark.documents:]

    def vectors(self) -> np.ndarray:
        """The new chunks' vectors, float32, one row each (after `flush`)."""
        if len(self._vectors) != 1:
            self._vectors = [np.vstack(self._vectors) if self._vectors else np.zeros((0, 256), np.float32)]
        return self._vectors[0]

    def flush(self) -> None:
        """Cut, embed and analyze the documents held, and let them go."""
        documents, self._pending, self._pending_chars = self._pending, [], 0
        if not documents:
            return
        nodes = self.node_parser.get_nodes_from_documents(documents)
        hidden = {*HIDDEN_KEYS, SPANS_KEY}
        texts = []
        for node in nodes:
            node.metadata["doc_id"] = node.ref_doc_id
            # Split once, here: the grader and refiner read these instead of splitting again.
            node.metadata[SPANS_KEY] = sentence_spans(node.get_content())
            # Extend, not replace: a parser's own hidden keys (a sentence window) stay hidden.
            node.excluded_embed_metadata_keys = sorted({*node.excluded_embed_metadata_keys, *hidden})
            node.excluded_llm_metadata_keys = sorted({*node.excluded_llm_metadata_keys, *hidden})
            texts.append(node.get_content())
        if self.summarize is not None:
            try:
                self.summaries.update(self.summarize(documents))
            except IngestError as exc:
                raise SummaryFailed(str(exc)) from None
        del documents
        self._vectors.append(self._embed(texts, len(self.nodes)))
        self._terms = self.terms.extended(texts)
        self.nodes.extend(nodes)

    def _embed(self, texts: list[str], before: int) -> np.ndarray:
        if self._model is None:
            self._model = self._model_factory()
        total = before + len(texts)
        if self.progress:
            self.progress("embed", before, total)
        parts = []
        for start in range(0, len(texts), EMBED_BATCH):
            parts.append(np.asarray(self._model.embed_many(texts[start : start + EMBED_BATCH]), np.float32))
            if self.progress:
                self.progress("embed", before + min(start + EMBED_BATCH, len(texts)), total)
        return np.vstack(parts) if parts else np.zeros((0, 256), np.float32)
