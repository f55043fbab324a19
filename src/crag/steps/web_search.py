"""Web search: a BM25 search over a local corpus (offline), or Tavily."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from llama_index.core.schema import NodeWithScore, TextNode

from crag import text
from crag._offload import off_loop
from crag.errors import SearchError, redact, register_secret, scrub
from crag.index.lexical import BM25
from crag.ingestion.readers import find_files, read_documents

T = TypeVar("T")


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
        except Exception as exc:
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
        session = _retrying_session(
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
            documents = await _in_daemon_thread(self._search, query)
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


def _in_daemon_thread(function: Callable[..., T], *args: object) -> asyncio.Future[T]:
    """`function(*args)` in a daemon thread, as a future of the running loop.

    Unlike `asyncio.to_thread`, nothing waits for the thread once the future is
    cancelled: neither the run nor `asyncio.run`'s shutdown of the default executor.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(setter: Callable[[Any], None], value: object) -> None:
        if not future.done():
            setter(value)

    def work() -> None:
        try:
            outcome: tuple[Callable[[Any], None], object] = (future.set_result, function(*args))
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            outcome = (future.set_exception, exc)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    threading.Thread(target=work, name="crag-web-search", daemon=True).start()
    return future


def _check_search_answer(response, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
    """A requests response hook: a 200 from /search must be Tavily's JSON shape."""
    if response.status_code != 200 or not response.request.path_url.split("?")[0].endswith("/search"):
        return
    try:
        body = response.json()
    except ValueError as exc:
        raise SearchError(f"Tavily search failed: the answer is not JSON ({exc}).") from None
    if not isinstance(body, dict) or not isinstance(body.get("results"), list):
        found = f"keys {sorted(body)[:8]}" if isinstance(body, dict) else f"a JSON {type(body).__name__}"
        raise SearchError(f"Tavily search failed: the answer has no 'results' list ({found}).")
    for number, result in enumerate(body["results"], start=1):
        for key in ("content", "url"):
            if not isinstance(result, dict) or not isinstance(result.get(key), str):
                raise SearchError(f"Tavily search failed: result {number} of the answer has no '{key}' text.")


def _retrying_session(  # noqa: ANN202
    *, timeout: float, max_retries: int, backoff: float, pool_size: int = 10, max_retry_after: float = 30.0
):
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.exceptions import InvalidHeader, MaxRetryError, ResponseError
    from urllib3.util.retry import Retry

    class _TimeoutAdapter(HTTPAdapter):
        def send(self, request, **kwargs):  # noqa: ANN001, ANN003, ANN202
            kwargs["timeout"] = min(kwargs.get("timeout") or timeout, timeout)
            return super().send(request, **kwargs)

    class _Retry(Retry):
        def get_retry_after(self, response):  # noqa: ANN001, ANN202
            try:
                return super().get_retry_after(response)
            except InvalidHeader:  # "Retry-After: soon": use the backoff instead
                return None

        def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):  # noqa: ANN001, ANN202
            wait = self.get_retry_after(response) if response is not None else None
            if wait is not None and wait > max_retry_after:
                # Sleeping that long would outlast the run; give the client the answer now.
                raise MaxRetryError(_pool, url, ResponseError(f"Retry-After {wait:g} s"))
            return super().increment(method, url, response, error, _pool, _stacktrace)

    retry = _Retry(
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
    adapter = _TimeoutAdapter(max_retries=retry, pool_maxsize=pool_size)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    def check_retry_after(response, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        wait = retry.get_retry_after(response) if response.status_code in (429, 503) else None
        if wait is not None and wait > max_retry_after:
            raise SearchError(
                f"Tavily search failed: HTTP {response.status_code}, and the server asks to wait "
                f"{wait:.0f} s before trying again (Retry-After); crag waits at most {max_retry_after:g} s."
            )

    session.hooks["response"] = [check_retry_after, _check_search_answer]
    return session
