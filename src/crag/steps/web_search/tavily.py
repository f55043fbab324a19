"""Tavily's search API, through llama-index-tools-tavily-research, off the event loop."""

from __future__ import annotations

import threading

from llama_index.core.schema import NodeWithScore, TextNode

from crag.errors import SearchError, redact, register_secret, scrub
from crag.steps.web_search.http import in_daemon_thread, retrying_session


class TavilySearch:
    """Tavily's search API through llama-index-tools-tavily-research.

    The tool's client is synchronous (requests), so it runs in a daemon thread and never
    blocks the event loop; a run that is cancelled (its timeout) stops waiting for it at
    once, and the process can exit without waiting for the thread. Its HTTP session
    retries 429s, 5xx answers and dropped connections with exponential backoff and
    jitter, honouring `Retry-After` up to `MAX_RETRY_AFTER` seconds (a longer one fails at
    once instead of sleeping), and bounds every attempt with `timeout`. An answer that is
    not Tavily's shape (no `results` list, a result without `content` or `url`) is a
    `SearchError`, not an empty result list.

    Args:
        api_key: the Tavily key.
        base_url: another endpoint speaking Tavily's API (a proxy, or a test server).
        top_k: results returned.
        timeout: seconds per HTTP attempt (connect and read).
        max_retries: attempts after the first, for 429, 5xx and dropped connections.
        backoff: base of the exponential backoff, in seconds.
        concurrency: searches in flight at once (the size of the connection pool).
    """

    MAX_RETRY_AFTER = 30.0

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str | None = None,
        top_k: int = 3,
        timeout: float = 20.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        concurrency: int = 16,
    ) -> None:
        from llama_index.tools.tavily_research import TavilyToolSpec
        from tavily import TavilyClient

        register_secret(api_key)
        self.tool = TavilyToolSpec(api_key=api_key)
        session = retrying_session(
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            pool_size=concurrency,
            max_retry_after=self.MAX_RETRY_AFTER,
        )
        self.tool.client = TavilyClient(
            api_key=api_key, api_base_url=base_url.rstrip("/") if base_url else None, session=session
        )
        self.top_k = top_k
        self.timeout = timeout
        self.max_retries = max_retries
        self._slots = threading.BoundedSemaphore(concurrency)

    async def search(self, query: str) -> list[NodeWithScore]:
        try:
            documents = await in_daemon_thread(self._search, query)
        except SearchError:
            raise
        except Exception as exc:  # noqa: BLE001 - the client raises many kinds
            scrub(exc)  # an error body may echo the key
            raise SearchError(f"Tavily search failed: {redact(self._explain(exc))}") from exc
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

    def _search(self, query: str) -> list:
        with self._slots:
            return self.tool.search(query, max_results=self.top_k)

    def _explain(self, exc: BaseException) -> str:
        """One line naming what went wrong, without urllib3's nested reprs."""
        import requests
        from urllib3.exceptions import (
            MaxRetryError,
            NewConnectionError,
            ProtocolError,
            TimeoutError,
        )

        reason: BaseException = exc
        if isinstance(exc, requests.ConnectionError) and exc.args and isinstance(exc.args[0], MaxRetryError):
            reason = exc.args[0].reason or exc
        attempts = f"{self.max_retries + 1} attempt(s)"
        if isinstance(reason, NewConnectionError):  # before TimeoutError: urllib3 derives it from that
            return f"ConnectionError: cannot connect to {self.tool.client.base_url}, {attempts}"
        if isinstance(reason, (TimeoutError, requests.Timeout)) or type(exc).__name__ == "TimeoutError":
            return f"TimeoutError: no answer within {self.timeout:g} s per attempt, {attempts}"
        if isinstance(reason, ProtocolError):
            return f"ConnectionError: the server hung up without answering, {attempts}"
        if isinstance(exc, requests.exceptions.ChunkedEncodingError):
            return "ConnectionError: the answer was cut off before its end"
        return f"{type(exc).__name__}: {exc}"
