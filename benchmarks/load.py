"""Load: many concurrent questions through one crag workflow, with faulty servers.

    .venv/bin/python benchmarks/load.py [--queries 200] [--fault-rate 0.1] [--seed 7]
    .venv/bin/python benchmarks/load.py --http [--seconds 60]   (crag serve; see _http_load.py)
    .venv/bin/python benchmarks/load.py --smoke                 (10 queries; not --http)

One `CorrectiveRAGWorkflow` (LLM grader, rewriter and synthesizer; Tavily web search),
`--queries` concurrent `run()`s on it. The LLM and Tavily are loopback servers on
127.0.0.1 (tests/support/loopback.py) that answer a fraction `--fault-rate` of requests with a
fault drawn at random (seeded, so a run is repeatable): HTTP 500, HTTP 429 with
`Retry-After: 1`, a connection reset, or no answer until past the client's timeout.
Half the questions are answered by the small index (Correct), half need the web.

Every query must end as an answer (perhaps degraded: a fallback stood in for a failed
component) or as a `CragError` / `WorkflowTimeoutError` with a message; anything else
is counted as unhandled, and so is any exception an asyncio task dropped on the floor.
It prints one line:

    load: 200 queries, 200 answered (17 degraded), 0 errors, 0 unhandled, p50 0.21 s, p95 0.80 s, wall 4.2 s

and exits 1 if anything was unhandled or unanswered. Bounded: every server fault costs
at most `--timeout` seconds per attempt, every run is cancelled at `--run-timeout`, and
the whole load at `--budget` seconds. Nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _harness

sys.path.insert(0, str(_harness.TESTS))

from support.loopback import (  # noqa: E402 - tests/ is put on the path just above
    Drop,
    LoopbackServer,
    Reply,
    Stall,
    chaos,
    openai_chat,
    tavily_result,
    tavily_search,
)

# crag is imported where it is used: the server processes import this module and need
# only the loopback servers.

TOPICS = {
    "battery": "The Zephyr drone battery lasts 42 minutes per charge. Store it at half charge.",
    "charger": "The Zephyr charger fills an empty battery in about two hours.",
    "camera": "The Zephyr camera records 4K video at 60 frames per second.",
    "warranty": "The Zephyr warranty covers manufacturing defects for two years.",
    "range": "The Zephyr remote controller reaches the drone up to 8 kilometres away.",
    "weight": "The Zephyr drone weighs 249 grams, under the registration limit.",
}
INTERNAL_QUESTIONS = [
    "How long does the Zephyr battery last?",
    "How long does the Zephyr charger take to fill the battery?",
    "What video does the Zephyr camera record?",
    "What does the Zephyr warranty cover?",
    "How far does the Zephyr remote controller reach?",
    "How much does the Zephyr drone weigh?",
]
WEB_QUESTIONS = [
    "Who painted the Mona Lisa?",
    "Who invented the telephone?",
    "When did the Berlin Wall fall?",
    "What is the capital of Australia?",
    "Who wrote War and Peace?",
]
WEB_PAGES = [
    tavily_result("Mona Lisa", "https://example.org/mona-lisa", "The Mona Lisa was painted by Leonardo da Vinci."),
    tavily_result("Telephone", "https://example.org/telephone", "Alexander Graham Bell patented the telephone in 1876."),
    tavily_result("Berlin Wall", "https://example.org/berlin-wall", "The Berlin Wall fell on 9 November 1989."),
    tavily_result("Canberra", "https://example.org/canberra", "Canberra is the capital city of Australia."),
    tavily_result("War and Peace", "https://example.org/war-and-peace", "Leo Tolstoy wrote War and Peace."),
]


def questions(n: int) -> list[str]:
    """`n` distinct questions, alternating between the index and the web."""
    pool = [q for pair in zip(INTERNAL_QUESTIONS, WEB_QUESTIONS) for q in pair]
    return [f"{pool[i % len(pool)]} (case {i})" for i in range(n)]


def model_reply(prompt: str) -> str:
    """A plausible model: grades by shared words, rewrites to keywords, cites passage 1."""
    if "Rate how relevant the document is" in prompt:
        question = prompt.split("Question:", 1)[1].split("\n", 1)[0].lower()
        document = prompt.split("Document:", 1)[1].split("Rate how relevant", 1)[0].lower()
        shared = {w for w in re.findall(r"[a-z]{4,}", question)} & set(re.findall(r"[a-z]{4,}", document))
        return "9" if len(shared - {"zephyr", "does", "what", "long", "much"}) else "1"
    if prompt.startswith("Rewrite the question"):
        question = prompt.split("Question:", 1)[1].split("\n", 1)[0]
        return " ".join(w for w in re.findall(r"[A-Za-z]{4,}", question) if w.lower() != "case")
    return "From the passages: see [1]."


def web_results(body: dict) -> list[dict]:
    words = set(re.findall(r"[a-z]{4,}", str(body.get("query", "")).lower()))
    return [p for p in WEB_PAGES if words & set(re.findall(r"[a-z]{4,}", (p["title"] + p["content"]).lower()))]


@dataclass
class LoadReport:
    queries: int = 0
    answered: int = 0
    degraded: int = 0
    errors: Counter = field(default_factory=Counter)  # CragError / timeout messages, by type
    unhandled: list[str] = field(default_factory=list)  # anything else, one line each
    latencies: list[float] = field(default_factory=list)
    wall: float = 0.0
    llm_requests: int = 0
    search_requests: int = 0
    faults: int = 0  # requests the servers answered with a fault
    degradations: Counter = field(default_factory=Counter)  # by step

    def percentile(self, q: float) -> float:
        return _harness.percentile(self.latencies, q)

    def line(self) -> str:
        return (
            f"load: {self.queries} queries, {self.answered} answered ({self.degraded} degraded), "
            f"{sum(self.errors.values())} errors, {len(self.unhandled)} unhandled, "
            f"p50 {self.percentile(0.5):.2f} s, p95 {self.percentile(0.95):.2f} s, wall {self.wall:.1f} s"
        )


def faulty_handler(kind: str, fault_rate: float, seed: int, stall: float):  # noqa: ANN201
    """The LLM ("llm") or Tavily ("web") server's handler, with faults at `fault_rate`."""
    if kind == "llm":
        error = Reply(500, {"error": {"message": "overloaded", "type": "server_error"}})
        limited = Reply(429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"Retry-After": "1"})
        handler = openai_chat(model_reply)
    else:
        error = Reply(500, {"detail": {"error": "overloaded"}})
        limited = Reply(429, {"detail": {"error": "rate limited"}}, {"Retry-After": "1"})
        handler = tavily_search(web_results)
    faults = [error, limited, Drop(reset=True), Stall(stall)]
    return chaos(handler, rate=fault_rate, faults=faults, seed=seed)


def serve(kind: str, fault_rate: float, seed: int, stall: float) -> None:
    """Run one faulty server until stdin closes: print its URL first, and at the end how many
    requests it answered and how many of them with a fault (`server_process` reads them)."""
    handler = faulty_handler(kind, fault_rate, seed, stall)
    faults = []

    def counting(request: Any) -> Any:
        answer = handler(request)
        if not isinstance(answer, Reply) or answer.status >= 400:
            faults.append(answer)
        return answer

    with LoopbackServer(counting) as server:
        print(server.url, flush=True)
        sys.stdin.read()  # until the parent closes it
    print(len(server.requests), len(faults), flush=True)


@contextmanager
def server_process(kind: str, fault_rate: float, seed: int, stall: float) -> Iterator[dict]:
    """A faulty loopback server in its own process, so that its threads do not compete with
    crag's event loop for the interpreter lock. A fresh interpreter that imports only this
    module and tests/support/loopback.py (multiprocessing's spawn would import the caller's
    main module too: seconds, for pytest). Yields {"url": ...}; after the block, "requests" and
    "faults" hold how many requests it answered, and how many of them with a fault."""
    here = str(Path(__file__).resolve().parent)
    code = (
        f"import sys; sys.path.insert(0, {here!r}); import load; "
        "load.serve(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, kind, str(fault_rate), str(seed), str(stall)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        url = process.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the {kind} server did not start")
        box = {"url": url, "requests": 0, "faults": 0}
        yield box
        process.stdin.close()
        counts = process.stdout.readline().split()
        if len(counts) == 2:
            box["requests"], box["faults"] = map(int, counts)
    finally:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def build_index(root: Path) -> Path:
    import crag

    docs = root / "docs"
    docs.mkdir()
    for name, text in TOPICS.items():
        (docs / f"{name}.md").write_text(f"# {name.title()}\n{text}\n", encoding="utf-8")
    crag.ingest([docs], root / "index")
    return root / "index"


async def run_load(
    n: int = 200,
    *,
    fault_rate: float = 0.1,
    seed: int = 7,
    timeout: float = 1.0,
    retries: int = 2,
    run_timeout: float = 30.0,
    budget: float = 120.0,
) -> LoadReport:
    """`n` concurrent queries through one workflow against faulty loopback servers."""
    from workflows.errors import WorkflowTimeoutError

    import crag

    report = LoadReport(queries=n)
    loop = asyncio.get_running_loop()
    previous_handler = loop.get_exception_handler()

    def dropped(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        # An exception no one awaited (a task that died in the background) is unhandled too.
        exc = context.get("exception")
        report.unhandled.append(f"background: {type(exc).__name__ if exc else ''} {context.get('message')}")

    stall = timeout * 3
    with (
        tempfile.TemporaryDirectory() as tmp,
        server_process("llm", fault_rate, seed, stall) as llm,
        server_process("web", fault_rate, seed, stall) as web,
    ):
        index_dir = build_index(Path(tmp))
        settings = crag.Settings.load(
            env={
                "OPENAI_BASE_URL": llm["url"] + "/v1",
                "OPENAI_API_KEY": "sk-load-test",
                "TAVILY_API_KEY": "tvly-load-test",
            },
            index={"path": index_dir},
            llm={"timeout": timeout, "max_retries": retries},
            web_search={"base_url": web["url"], "timeout": timeout, "max_retries": retries},
            run={"timeout": run_timeout},
        )
        workflow = crag.build_workflow(settings)

        async def one(question: str) -> None:
            started = time.perf_counter()
            try:
                result = await workflow.run(query=question)
            except (crag.CragError, WorkflowTimeoutError) as exc:
                report.errors[f"{type(exc).__name__}: {str(exc)[:80]}"] += 1
            except Exception as exc:  # noqa: BLE001 - the point is to count these
                report.unhandled.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            else:
                if result.answer.strip():
                    report.answered += 1
                else:
                    report.unhandled.append(f"empty answer to {question!r}")
                report.degraded += bool(result.degraded)
                report.degradations.update(d.split(":", 1)[0] for d in result.degraded)
            report.latencies.append(time.perf_counter() - started)

        try:  # one untimed run first: it loads the embedding model and the sentence tables
            await workflow.run(query="How heavy is the Zephyr drone? (warm-up)")
        except (crag.CragError, WorkflowTimeoutError):
            pass
        loop.set_exception_handler(dropped)
        started = time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.gather(*(one(q) for q in questions(n))), budget)
        except asyncio.TimeoutError:
            report.unhandled.append(f"the load did not finish within its budget of {budget:g} s")
        finally:
            report.wall = time.perf_counter() - started
            loop.set_exception_handler(previous_handler)
    report.llm_requests, report.search_requests = llm["requests"], web["requests"]
    report.faults = llm["faults"] + web["faults"]
    return report


def main() -> int:
    cli = _harness.parser(__doc__)
    cli.add_argument("--queries", type=int, default=200)
    cli.add_argument("--fault-rate", type=float, default=0.1)
    cli.add_argument("--seed", type=int, default=7)
    cli.add_argument("--timeout", type=float, default=1.0, help="per-attempt timeout, LLM and search")
    cli.add_argument("--retries", type=int, default=2, help="max_retries, LLM and search")
    cli.add_argument("--run-timeout", type=float, default=30.0)
    cli.add_argument("--budget", type=float, default=120.0, help="seconds for the whole load")
    cli.add_argument("-v", "--verbose", action="store_true", help="also print what degraded and why")
    http = cli.add_argument_group("--http: crag serve under 0.5x, 1x and 3x its capacity (_http_load.py)")
    http.add_argument("--http", action="store_true", help="drive a crag serve process instead")
    http.add_argument("--seconds", type=float, default=60.0, help="seconds per level")
    http.add_argument("--latency", type=float, default=0.05, help="seconds per fake LLM call")
    http.add_argument("--max-runs", type=int, default=8, help="crag serve's [server] max_runs")
    http.add_argument("--max-queue", type=int, default=8, help="crag serve's [server] max_queue")
    http.add_argument("--request-timeout", type=float, default=60.0, help="client timeout per request")
    args = _harness.parse(cli, smoke={"queries": 10})
    with _harness.measured(__file__, args) as run:
        if args.http:
            from _http_load import run_http

            return run_http(args, run)
        if args.smoke:
            run.skip("--http, crag serve at 0.5x, 1x and 3x its capacity",
                     "a minute a level; throughput.py's smoke starts crag serve")
        return run_inprocess(args, run)


def run_inprocess(args, run: _harness.Run) -> int:  # noqa: ANN001
    report = asyncio.run(
        run_load(
            args.queries,
            fault_rate=args.fault_rate,
            seed=args.seed,
            timeout=args.timeout,
            retries=args.retries,
            run_timeout=args.run_timeout,
            budget=args.budget,
        )
    )
    print(report.line())
    if args.verbose:
        print(f"  requests: {report.llm_requests} to the LLM, {report.search_requests} to Tavily, "
              f"{report.faults} of them answered with a fault")
        print(f"  degraded steps: {dict(report.degradations)}")
        print(f"  mean latency {statistics.fmean(report.latencies or [0]):.2f} s")
        for message, count in report.errors.most_common():
            print(f"  error x{count}: {message}")
        for message in report.unhandled[:20]:
            print(f"  unhandled: {message}")
    run.figures = {"queries": report.queries, "answered": report.answered, "degraded": report.degraded,
                   "errors": sum(report.errors.values()), "unhandled": len(report.unhandled),
                   "p50_seconds": report.percentile(0.5), "p95_seconds": report.percentile(0.95),
                   "wall_seconds": report.wall}
    run.goal("queries unhandled", len(report.unhandled), at_most=0)
    ok = not report.unhandled and report.answered + sum(report.errors.values()) == report.queries
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
