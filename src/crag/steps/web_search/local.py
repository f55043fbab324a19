"""The offline web: BM25 over a local folder or .jsonl corpus, standing in for a search engine."""

from __future__ import annotations

import threading
from pathlib import Path

from llama_index.core.schema import NodeWithScore, TextNode

from crag import text
from crag._offload import off_loop
from crag.errors import IngestError, SearchError
from crag.index.lexical import BM25
from crag.ingestion.readers import find_files, read_documents


class LocalCorpusSearch:
    """Searches a folder of documents or a .jsonl corpus with BM25, standing in for the web.

    Args:
        corpus: a directory or file (.txt, .md, .html, .jsonl); read by `warm_up`, or by
            the first search.
        top_k: results returned.
    """

    def __init__(self, corpus: str | Path, *, top_k: int = 3) -> None:
        self.corpus = Path(corpus)
        self.top_k = top_k
        self._nodes: list[TextNode] | None = None
        self._bm25: BM25 | None = None
        self._loading = threading.Lock()

    def warm_up(self) -> None:
        """Read the corpus and build its BM25 now, not in the first run that searches."""
        self._load()

    async def search(self, query: str) -> list[NodeWithScore]:
        return await off_loop(self._search, query)

    def _search(self, query: str) -> list[NodeWithScore]:
        nodes, bm25 = self._load()
        return [NodeWithScore(node=nodes[i], score=s) for i, s in bm25.top(query, self.top_k)]

    def _load(self) -> tuple[list[TextNode], BM25]:
        with self._loading:  # searches of concurrent runs may be the first, in several threads
            if self._nodes is None or self._bm25 is None:
                self._nodes, self._bm25 = self._read()
            return self._nodes, self._bm25

    def _read(self) -> tuple[list[TextNode], BM25]:
        text.warm_up()
        try:
            docs = [d for f in find_files([self.corpus]) for d in read_documents(f)]
        except (IngestError, OSError) as exc:  # missing, unreadable, or not a corpus
            raise SearchError(f"Web corpus {self.corpus} is unusable: {exc}") from None
        nodes = [
            TextNode(
                id_=f"web:{d.doc_id}",
                text=d.text,
                metadata={
                    "title": d.metadata.get("title"),
                    "url": d.metadata.get("url") or f"{Path(d.metadata['file']).resolve().as_uri()}#{d.doc_id}",
                    "kind": "web",
                    "doc_id": d.doc_id,
                },
            )
            for d in docs
        ]
        # A page's title is searched with its text, as a web search engine matches titles.
        return nodes, BM25([f"{n.metadata['title'] or ''}\n{n.text}" for n in nodes])
