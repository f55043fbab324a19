"""CPU per chat call through crag's OpenAI client with many calls in flight.

    .venv/bin/python benchmarks/model_client.py [--calls 1400] [--latency 0.05] [--pools 64] [--smoke]

`crag.models.openai_llm` against the fake chat server of throughput.py (its own process,
answering after `--latency` s), `--calls` calls at once (crag lets 64 be in flight per
model), untimed warm-up call first. Prints this process's CPU time per call: the client
stack (llama-index, the openai SDK, httpx) is what is measured. `--pools 1` is openai's
default (one httpx pool), for comparison.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import _harness
import throughput  # the fake model server
from llama_index.core.llms import ChatMessage

from crag import models
from crag.config import LLMSettings
from crag.models import http_pools


async def calls(llm: object, n: int) -> tuple[float, float]:
    """Wall and CPU seconds for `n` concurrent calls."""
    messages = [ChatMessage(role="user", content="Question: why?\nDocument: because.")]
    await llm.achat(messages)  # type: ignore[attr-defined] - warm-up: connection, imports
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(llm.achat(messages) for _ in range(n)))  # type: ignore[attr-defined]
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    cli = _harness.parser(__doc__)
    cli.add_argument("--calls", type=int, default=1400)
    cli.add_argument("--latency", type=float, default=0.05)
    cli.add_argument("--pools", type=int, default=http_pools.POOL_SHARDS)
    args = _harness.parse(cli, smoke={"calls": 20})
    http_pools.POOL_SHARDS = args.pools
    with _harness.measured(__file__, args) as run, tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        corpus.write_text('{"doc_id": "a", "title": "t", "text": "x"}\n', encoding="utf-8")
        with throughput.fake_server(args.latency, corpus) as url:
            llm = models.openai_llm(LLMSettings(base_url=url + "/v1", api_key="sk-fake"))
            wall, cpu = asyncio.run(calls(llm, args.calls))
        print(
            f"{args.calls} calls, {args.pools} pool(s), fake latency {args.latency * 1000:.0f} ms: "
            f"wall {wall:.2f} s, client CPU {cpu:.2f} s = {1000 * cpu / args.calls:.2f} ms per call "
            f"(load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs)"
        )
        run.figures = {"calls": args.calls, "pools": args.pools, "wall_seconds": wall,
                       "client_cpu_ms_per_call": 1000 * cpu / args.calls}


if __name__ == "__main__":
    main()
