"""Web search: a BM25 search over a local corpus (offline), or Tavily."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llama_index.core.schema import NodeWithScore, TextNode

from crag.errors import SearchError
from crag.readers import find_files, read_documents
from crag.steps.bm25 import BM25


class LocalCorpusSearch:
    """Searches a folder of documents or a .jsonl corpus with BM25, standing in for the web.

    Args:
        corpus: a directory or file (.txt, .md, .html, .jsonl); loaded on first search.
        top_k: results returned.
    """

    def __init__(self, corpus: str | Path, *, top_k: int = 3) -> None:
        self.corpus = Path(corpus)
        self.top_k = top_k
        self._nodes: list[TextNode] | None = None
        self._bm25: BM25 | None = None

    def _load(self) -> tuple[list[TextNode], BM25]:
        if self._nodes is None or self._bm25 is None:
            try:
                docs = [d for f in find_files([self.corpus]) for d in read_documents(f)]
            except Exception as exc:
                raise SearchError(f"Web corpus {self.corpus} is unusable: {exc}") from None
            self._nodes = [
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
            self._bm25 = BM25([n.text for n in self._nodes])
        return self._nodes, self._bm25

    async def search(self, query: str) -> list[NodeWithScore]:
        nodes, bm25 = self._load()
        return [NodeWithScore(node=nodes[i], score=s) for i, s in bm25.top(query, self.top_k)]


class TavilySearch:
    """Tavily's search API through llama-index-tools-tavily-research.

    The tool's client is synchronous (requests), so it runs in a worker thread and never
    blocks the event loop. Its HTTP session retries 429s and 5xx answers with exponential
    backoff and jitter, honouring `Retry-After` (urllib3's `Retry`), and bounds every
    attempt with `timeout`.

    Args:
        api_key: the Tavily key.
        base_url: another endpoint speaking Tavily's API (a proxy, or a test server).
        top_k: results returned.
        timeout: seconds per HTTP attempt (connect and read).
        max_retries: attempts after the first, for 429, 5xx and dropped connections.
        backoff: base of the exponential backoff, in seconds.
    """

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str | None = None,
        top_k: int = 3,
        timeout: float = 20.0,
        max_retries: int = 2,
        backoff: float = 0.5,
    ) -> None:
        from llama_index.tools.tavily_research import TavilyToolSpec
        from tavily import TavilyClient

        self.tool = TavilyToolSpec(api_key=api_key)
        session = _retrying_session(timeout=timeout, max_retries=max_retries, backoff=backoff)
        self.tool.client = TavilyClient(
            api_key=api_key, api_base_url=base_url.rstrip("/") if base_url else None, session=session
        )
        self.top_k = top_k

    async def search(self, query: str) -> list[NodeWithScore]:
        try:
            documents = await asyncio.to_thread(self.tool.search, query, max_results=self.top_k)
        except Exception as exc:  # noqa: BLE001 - the client raises many kinds
            raise SearchError(f"Tavily search failed: {type(exc).__name__}: {exc}") from exc
        return [
            NodeWithScore(
                node=TextNode(
                    id_=f"web:{doc.metadata.get('url', i)}",
                    text=doc.text,
                    metadata={"url": doc.metadata.get("url"), "kind": "web"},  # the tool drops titles
                ),
                score=1.0 / (i + 1),
            )
            for i, doc in enumerate(documents)
        ]


def _retrying_session(*, timeout: float, max_retries: int, backoff: float):  # noqa: ANN202
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    class _TimeoutAdapter(HTTPAdapter):
        def send(self, request, **kwargs):  # noqa: ANN001, ANN003, ANN202
            kwargs["timeout"] = min(kwargs.get("timeout") or timeout, timeout)
            return super().send(request, **kwargs)

    retry = Retry(
        total=max_retries,
        backoff_factor=backoff,
        backoff_jitter=backoff,
        backoff_max=30.0,
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=None,  # Tavily searches are POSTs, and safe to repeat
        respect_retry_after_header=True,
        raise_on_status=False,  # the last answer reaches the client, which names the error
    )
    session = requests.Session()
    adapter = _TimeoutAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
