"""The HTTP under Tavily's synchronous client: a session that retries with backoff and honours
Retry-After (urllib3's Retry, adapted), checks the answer's shape, and runs off the event loop.

Why urllib3's Retry and not tenacity: the tool's client is `requests`, whose adapters take a
`Retry` that already does exponential backoff with jitter, status lists and Retry-After; the
adaptation here is what no retry library knows (a Retry-After longer than a run is worth is
an answer now, not a sleep).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from crag.errors import SearchError

T = TypeVar("T")


def in_daemon_thread(function: Callable[..., T], *args: object) -> asyncio.Future[T]:
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


def check_search_answer(response, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
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


def retrying_session(  # noqa: ANN202
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

    session.hooks["response"] = [check_retry_after, check_search_answer]
    return session
