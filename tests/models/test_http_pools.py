"""The model client's HTTP transport: calls in flight spread over several connection pools,
each call to the pool with the fewest in flight, replies and errors passed through as is."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from crag.models.http_pools import MAX_IN_FLIGHT, async_http_client, pool_shards


class HeldPool(httpx.AsyncBaseTransport):
    """A pool that answers each request when the test lets it go."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.waiting: list[asyncio.Event] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        release = asyncio.Event()
        self.waiting.append(release)
        await release.wait()
        return httpx.Response(200, text=self.name)

    def release_one(self) -> None:
        self.waiting.pop(0).set()


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0)


async def test_each_call_goes_to_the_pool_with_fewest_in_flight() -> None:
    pools = [HeldPool("a"), HeldPool("b"), HeldPool("c")]
    async with httpx.AsyncClient(transport=pool_shards()(pools)) as client:
        first = [asyncio.create_task(client.get("http://model/v1")) for _ in range(3)]
        await _until(lambda: sum(len(p.waiting) for p in pools) == 3)
        assert [len(p.waiting) for p in pools] == [1, 1, 1]

        pools[1].release_one()
        assert (await first[1]).text == "b"
        fourth = asyncio.create_task(client.get("http://model/v1"))
        await _until(lambda: len(pools[1].waiting) == 1)
        assert [len(p.waiting) for p in pools] == [1, 1, 1]

        for pool in pools:
            pool.release_one()
        replies = [r.text for r in await asyncio.gather(first[0], first[2], fourth)]
    assert replies == ["a", "c", "b"]


async def test_a_pools_error_reaches_the_caller_unchanged() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    shards = pool_shards()([httpx.MockTransport(refuse)])
    async with httpx.AsyncClient(transport=shards) as client:
        with pytest.raises(httpx.ConnectError, match="connection refused"):
            await client.get("http://model/v1")
        assert shards.busy == [0]  # a failed call does not count as in flight


def test_the_model_client_has_a_pool_for_each_call_crag_lets_fly() -> None:
    transport = async_http_client()._transport
    assert isinstance(transport, pool_shards()) and len(transport.pools) == MAX_IN_FLIGHT
