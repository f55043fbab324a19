"""`load.py --http`: `crag serve` under a sustained arrival rate at 0.5×, 1× and 3× its capacity.

One `crag serve` process (throughput.py's `crag_server`: `crag ingest` then `crag serve`, the
SQuAD questions and their gold passages) at its default admission limits (`[server] max_runs`
8, `max_queue` 8 unless told), and throughput.py's fake model in its own process, with a
fraction `--fault-rate` of its answers a fault (tests/support/loopback.py `chaos`: HTTP 500,
HTTP 429 with Retry-After 1, a connection reset, or a stall past the client's timeout).

First the capacity: `2 × max_runs` clients asking one question after another (closed loop)
for `--seconds / 2`; completed runs per second. Then each level for `--seconds`: requests at
fixed intervals (open loop: an arrival does not wait for the one before) at 0.5, 1 and 3
times that rate, each `POST /workflows/crag/run` with a client timeout of `--request-timeout`.
A request ends completed (200 with an answer), rejected (503), failed (any other answer, or
an answer without a result) or stuck (no answer within the timeout, or by the end of the level
plus the timeout). "lost" counts requests that never got an HTTP answer at all (connection
refused, reset or closed). Beside them: p50/p95 of admitted runs, p95 of the 503 answers, the
server's RSS after the level, and event-loop lag: `GET /health` every 0.25 s, its time p95
and max (it answers without touching the runs, so its time is the loop's delay).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import _harness
import throughput
from _harness import percentile as pct
from support.loopback import Drop, LoopbackServer, Reply, Stall, chaos

LEVELS = (0.5, 1.0, 3.0)


def serve_faulty_fake(latency: float, corpus_path: str, rate: float, seed: int, stall: float) -> None:
    """throughput.py's fake, a fraction `rate` of answers a fault; URL first, until stdin closes."""
    corpus = [json.loads(line) for line in Path(corpus_path).read_text().splitlines() if line]
    faults = [
        Reply(500, {"error": {"message": "overloaded", "type": "server_error"}}),
        Reply(429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"Retry-After": "1"}),
        Drop(reset=True),
        Stall(stall),
    ]
    handler = throughput.fake_handler(latency, corpus)

    def faulty(request):
        return handler(request) if request.path == "/stats" else chaotic(request)

    chaotic = chaos(handler, rate=rate, faults=faults, seed=seed)
    with LoopbackServer(faulty) as server:
        print(server.url, flush=True)
        sys.stdin.read()


@contextmanager
def faulty_fake(latency: float, corpus: Path, rate: float, seed: int, stall: float) -> Iterator[str]:
    here = str(Path(__file__).resolve().parent)
    code = (
        f"import sys; sys.path.insert(0, {here!r}); import _http_load; "
        "_http_load.serve_faulty_fake(float(sys.argv[1]), sys.argv[2], float(sys.argv[3]), "
        "int(sys.argv[4]), float(sys.argv[5]))"
    )
    argv = [sys.executable, "-c", code, str(latency), str(corpus), str(rate), str(seed), str(stall)]
    with throughput.process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        url = child.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError("the fake model server did not start")
        yield url


@dataclass
class Level:
    name: str
    rate: float
    sent: int = 0
    completed: int = 0
    rejected: int = 0
    failed: int = 0
    stuck: int = 0
    lost: int = 0
    admitted: list[float] = field(default_factory=list)  # seconds, completed runs
    refusals: list[float] = field(default_factory=list)  # seconds, 503 answers
    lag: list[float] = field(default_factory=list)  # seconds, GET /health
    rss_mb: float = 0.0

    def line(self) -> str:
        return (
            f"{self.name:>5} {self.rate:>6.1f} {self.sent:>5} {self.completed:>9} {self.rejected:>8} "
            f"{self.failed:>6} {self.stuck:>5} {self.lost:>4} {pct(self.admitted, 0.5):>6.2f} "
            f"{pct(self.admitted, 0.95):>6.2f} {1000 * pct(self.refusals, 0.95):>9.0f} "
            f"{self.rss_mb:>7.0f} {1000 * pct(self.lag, 0.95):>8.0f} {1000 * max(self.lag, default=0):>8.0f}"
        )


HEADER = (
    f"{'level':>5} {'req/s':>6} {'sent':>5} {'completed':>9} {'rejected':>8} {'failed':>6} "
    f"{'stuck':>5} {'lost':>4} {'p50 s':>6} {'p95 s':>6} {'503 p95 ms':>9} {'RSS MB':>7} "
    f"{'lag p95':>8} {'lag max':>8}"
)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def one(client, server: throughput.Server, question: str, level: Level) -> None:
    import httpx

    started = time.perf_counter()
    try:
        response = await client.post(server.url, json=server.body(question))
    except httpx.TimeoutException:
        level.stuck += 1
        return
    except httpx.TransportError:  # refused, reset or closed without an answer
        level.lost += 1
        return
    seconds = time.perf_counter() - started
    if response.status_code == 503:
        level.rejected += 1
        level.refusals.append(seconds)
    elif response.status_code == 200 and server.answer(response.json()):
        level.completed += 1
        level.admitted.append(seconds)
    else:
        level.failed += 1


async def probe(client, base: str, level: Level, stop: asyncio.Event) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        try:
            await client.get(base + "/health", timeout=10)
            level.lag.append(time.perf_counter() - started)
        except Exception:  # noqa: BLE001 - a missed probe is a lag of 10 s
            level.lag.append(10.0)
        await asyncio.sleep(0.25)


async def capacity(server: throughput.Server, questions: list[str], workers: int, seconds: float) -> float:
    import httpx

    done, deadline = 0, time.monotonic() + seconds
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def worker(k: int) -> None:
            nonlocal done
            i = k
            while time.monotonic() < deadline:
                reply = await client.post(server.url, json=server.body(questions[i % len(questions)]))
                done += reply.status_code == 200
                i += workers

        started = time.monotonic()
        await asyncio.gather(*(worker(k) for k in range(workers)))
        return done / (time.monotonic() - started)


async def level_run(server: throughput.Server, questions: list[str], level: Level, seconds: float,
                    timeout: float) -> None:
    import httpx

    base = server.url.split("/workflows/")[0]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client, httpx.AsyncClient() as side:
        stop = asyncio.Event()
        prober = asyncio.create_task(probe(side, base, level, stop))
        tasks, start = [], time.monotonic()
        while (now := time.monotonic()) < start + seconds:
            due = start + level.sent / level.rate
            if due > now:
                await asyncio.sleep(due - now)
                continue
            question = questions[level.sent % len(questions)]
            tasks.append(asyncio.create_task(one(client, server, question, level)))
            level.sent += 1
        _, pending = await asyncio.wait(tasks, timeout=timeout + 5) if tasks else (set(), set())
        for task in pending:
            task.cancel()
        level.stuck += len(pending)
        stop.set()
        await prober
    level.rss_mb = rss_mb(server.pid)


def run_http(args, run: _harness.Run) -> int:  # noqa: ANN001
    questions, corpus = throughput.load_inputs(300)
    llm = f"timeout = {args.timeout}\nmax_retries = {args.retries}\n"
    with tempfile.TemporaryDirectory(prefix="crag-load-http-") as tmp:
        work = Path(tmp)
        corpus_path = work / "corpus.jsonl"
        corpus_path.write_text("".join(json.dumps(p) + "\n" for p in corpus), encoding="utf-8")
        with (
            faulty_fake(args.latency, corpus_path, args.fault_rate, args.seed, args.timeout * 3) as fake,
            throughput.crag_server(work, fake, corpus_path, 5, "local", queries=args.max_runs,
                                   max_queue=args.max_queue, llm_extra=llm) as server,
        ):
            measured = asyncio.run(capacity(server, questions, 2 * args.max_runs, max(5.0, args.seconds / 2)))
            print(f"load --http: crag serve (max_runs {args.max_runs}, max_queue {args.max_queue}), fake LLM "
                  f"{1000 * args.latency:.0f} ms per call, {100 * args.fault_rate:.0f}% faults; capacity "
                  f"{measured:.1f} runs/s (closed loop, {2 * args.max_runs} clients); {args.seconds:g} s per "
                  f"level; RSS {rss_mb(server.pid):.0f} MB before", flush=True)
            print(HEADER, flush=True)
            levels = []
            for factor in LEVELS:
                level = Level(f"{factor:g}x", factor * measured)
                asyncio.run(level_run(server, questions, level, args.seconds, args.request_timeout))
                print(level.line(), flush=True)
                levels.append(level)
    one_x, three_x = levels[1], levels[2]
    ratio = pct(three_x.admitted, 0.95) / max(pct(one_x.admitted, 0.95), 1e-9)
    late = sum(1 for s in three_x.refusals if s > 0.1)
    print(f"  3x: {late} of {three_x.rejected} 503s took over 100 ms; RSS {one_x.rss_mb:.0f} MB at 1x, "
          f"{three_x.rss_mb:.0f} MB at 3x")
    print(f"overload_3x: stuck {three_x.stuck}, lost {three_x.lost}, p95_ratio {ratio:.2f}")
    run.figures = {"capacity_runs_per_second": measured, "levels": [vars(level) | {
        "admitted": len(level.admitted), "refusals": len(level.refusals), "lag": len(level.lag),
        "p95_seconds": pct(level.admitted, 0.95), "lag_p95_ms": 1000 * pct(level.lag, 0.95)} for level in levels]}
    run.goal("requests stuck or lost at 3x", three_x.stuck + three_x.lost, at_most=0)
    return 0 if three_x.stuck == three_x.lost == 0 else 1
