"""The HTTP connection pools chat requests go through, and how many are in flight at once."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from crag._compat.openai import default_connection_limits

# Chat requests one model object keeps in flight at once, per event loop; the rest wait
# their turn. httpx's connection pool (httpcore) matches every queued request against
# every connection each time one frees up: with ~1000 requests in flight (200 concurrent
# runs grading 5 chunks each) that work starved the event loop and no request was sent.
MAX_IN_FLIGHT = 64


def async_http_client() -> Any:
    """openai's default async HTTP client (its timeout, limits, redirects), its requests
    spread over `POOL_SHARDS` of httpx's connection pools."""
    import httpx
    import openai

    pools = [
        httpx.AsyncHTTPTransport(verify=tls_context(), limits=default_connection_limits())
        for _ in range(POOL_SHARDS)
    ]
    return openai.DefaultAsyncHttpxClient(transport=pool_shards()(pools))


@cache
def tls_context() -> Any:
    """One TLS context for every pool of every client (a client is made per event loop, and
    `ask()` runs each question on a loop of its own): each context loads the CA bundle, ~10 ms."""
    import httpx

    return httpx.create_ssl_context()


# httpcore's pool walks all its connections (polling each idle socket) and all queued
# requests whenever a request starts or ends, so the CPU per call grows with the calls in
# flight; one pool per call in flight costs least, fewer pools more
# (benchmarks/model_client.py --pools N).
POOL_SHARDS = MAX_IN_FLIGHT


@cache
def pool_shards() -> type:
    """`PoolShards`, defined on first use (httpx comes with the openai SDK, imported late)."""
    import httpx

    class PoolShards(httpx.AsyncBaseTransport):
        """Several transports as one: each request goes to the one with the fewest requests
        in flight. Errors, timeouts and TLS stay those of the transports given."""

        def __init__(self, pools: Sequence[httpx.AsyncBaseTransport]) -> None:
            self.pools = list(pools)
            self.busy = [0] * len(self.pools)

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            shard = min(range(len(self.pools)), key=self.busy.__getitem__)
            self.busy[shard] += 1
            try:
                # Busy until the reply's headers arrive: where a model spends its time.
                return await self.pools[shard].handle_async_request(request)
            finally:
                self.busy[shard] -= 1

        async def aclose(self) -> None:
            for pool in self.pools:
                await pool.aclose()

    return PoolShards
