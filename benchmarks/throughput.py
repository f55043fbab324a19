"""Throughput: concurrent queries through one server process, crag vs the LlamaIndex CRAG pack.

    .venv/bin/python benchmarks/throughput.py [--queries 100] [--latency 0.05] [--skip-pack] [--smoke]

Each system runs behind one HTTP server process and gets the same load: `--queries`
concurrent POSTs from one httpx `AsyncClient` in this process, the same SQuAD questions
over the same small corpus (the questions' gold passages, from
../shared/data/squad-dev*.jsonl), the same top-k, and the same fake model:

* crag: `crag serve` (the product's server) over an index built by `crag ingest`, with a
  config whose `[llm] base_url` is the fake and whose web search is BM25 over the same
  corpus (`--crag-web tavily`: the fake's Tavily endpoint instead).
  `[server] max_runs` is the number of queries, so that the whole load is admitted at
  once, as the pack's harness admits it.
  `--crag-store PATH` sets its `[server] store`; `--crag-store memory` runs a bare
  WorkflowServer with its in-memory store instead, to see what storing runs costs.
* pack: `llama-index-packs-corrective-rag` 0.3.1 in its own venv (benchmarks/.venv-pack,
  made by vs_pack.py; uvicorn and Starlette added) behind `_pack_server.py`, a one-route
  harness that awaits the pack's workflow per request (read it for what is substituted).

The fake is one loopback server process (tests/support/loopback.py) per system: OpenAI
chat-completions at `/v1/chat/completions`, each call answered after `--latency` seconds;
Tavily-shaped `/search` over the same corpus (word overlap), at once. It grades every
chunk "no" (both systems then take their web path), rewrites a question to itself and
answers with a fixed sentence, so per query both make k grading calls, one rewrite, one
search and one answer call; the calls it counts are printed. Untimed warm-up: one query
per server before the load. Each server's CPU time over the load (total and per query) and
the machine's load average before and after are printed too: the machine may be shared.
At smoke size: 5 queries, crag only (the pack's venv needs pip and the network).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _harness

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(_harness.TESTS))

from _pack_driver import REWRITE_REPLY, reply_for  # noqa: E402 - shared fakes
from support.loopback import LoopbackServer, Reply, openai_chat, tavily_result, tavily_search  # noqa: E402

DATA = _harness.DATA
QUESTIONS = DATA / "squad-dev.jsonl"
CORPUS = DATA / "squad-dev-corpus.jsonl"
PACK_SERVER = HERE / "_pack_server.py"
CRAG = Path(sys.executable).with_name("crag")
GOAL = 10.0  # crag q/s over the pack's
GOAL_CPU_MS = 30.0  # crag's server CPU per query


# ---------------------------------------------------------------------------- the fake model


def question_in(rewrite_prompt: str) -> str:
    """The question inside a rewrite prompt, crag's ("Question: ...") or the pack's
    (between two "-------" rules); the rewrite is the question itself."""
    pack = re.search(r"Original Query:.*?-------\s*(.*?)\s*-------", rewrite_prompt, re.S)
    crag = re.search(r"^Question: (.*)$", rewrite_prompt, re.M)
    found = pack or crag
    return found.group(1).strip() if found else REWRITE_REPLY


def fake_handler(latency: float, corpus: list[dict[str, str]]) -> Callable[[Any], Reply]:
    """Chat completions after `latency` s (grade "no", rewrite to the question, a fixed
    answer); Tavily `/search` by word overlap with the corpus; `GET /stats` counts."""
    words = [set(re.findall(r"\w{3,}", (p["title"] + " " + p["text"]).lower())) for p in corpus]

    def results(body: dict[str, Any]) -> list[dict[str, Any]]:
        query = set(re.findall(r"\w{3,}", str(body.get("query", "")).lower()))
        ranked = sorted(range(len(corpus)), key=lambda i: -len(query & words[i]))
        return [
            tavily_result(corpus[i]["title"], f"https://example.org/{i}", corpus[i]["text"])
            for i in ranked
        ]

    def reply(prompt: str) -> str:
        text = reply_for(prompt)
        return question_in(prompt) if text == REWRITE_REPLY else text

    chat, search = openai_chat(reply, delay=lambda prompt: latency), tavily_search(results)
    counts: Counter[str] = Counter()

    def handle(request: Any) -> Reply:
        if request.path == "/stats":
            return Reply(200, dict(counts))
        kind = "search" if request.path == "/search" else "chat"
        counts[kind] += 1  # Counter updates are atomic enough under the GIL for a tally
        return search(request) if kind == "search" else chat(request)

    return handle


def serve_fake(latency: float, corpus_path: str) -> None:
    """Run the fake until stdin closes; its URL is the first line printed."""
    corpus = [json.loads(line) for line in Path(corpus_path).read_text().splitlines() if line]
    with LoopbackServer(fake_handler(latency, corpus)) as server:
        print(server.url, flush=True)
        sys.stdin.read()


# ---------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def process(argv: list[str], **kwargs: Any) -> Iterator[subprocess.Popen]:
    """A child process, stopped (terminate, then kill) when the block ends."""
    child = subprocess.Popen(argv, **kwargs)
    try:
        yield child
    finally:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


@contextmanager
def fake_server(latency: float, corpus_path: Path) -> Iterator[str]:
    """The fake in its own process, so its threads do not compete with the client's loop."""
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import throughput; "
        "throughput.serve_fake(float(sys.argv[1]), sys.argv[2])"
    )
    argv = [sys.executable, "-c", code, str(latency), str(corpus_path)]
    with process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        url = child.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError("the fake model server did not start")
        yield url


def wait_until_up(url: str, child: subprocess.Popen, name: str, log: Path, limit: float = 180) -> None:
    import httpx

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"the {name} server exited ({child.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the {name} server did not answer {url} within {limit:.0f} s")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux /proc), or None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


# ---------------------------------------------------------------------------- the two servers


@dataclass
class Server:
    """A system's server, ready: where to POST a question and how to read the answer."""

    name: str
    note: str  # what serves it, for the report
    pid: int
    url: str
    body: Callable[[str], dict[str, Any]]
    answer: Callable[[Any], str | None]  # the answer in a 200 reply's JSON, None if absent


def serve_bare(config: str, port: int) -> None:
    """For `--crag-store memory`: llama-agents-server's WorkflowServer, what `crag serve` is
    built on, with its default in-memory store and workflow "crag", and no crag middleware."""
    import crag

    settings = crag.Settings.load(config_file=config)
    from llama_agents.server import WorkflowServer

    server = WorkflowServer()
    server.add_workflow("crag", crag.build_workflow(settings))
    crag.settle_heap()  # this process serves runs, as `crag serve`'s does
    asyncio.run(server.serve(host="127.0.0.1", port=port, uvicorn_config={"log_level": "warning"}))


def crag_answer(reply: Any) -> str | None:
    """The answer in WorkflowServer's handler JSON: {"status", "result": {..., "answer"}}."""
    if not isinstance(reply, dict) or reply.get("status") != "completed":
        return None
    result = reply.get("result")
    for key in ("value", "result"):  # the serialized StopEvent, then the CragResult in it
        if isinstance(result, dict) and key in result:
            result = result[key]
    answer = result.get("answer") if isinstance(result, dict) else None
    return answer if isinstance(answer, str) else None


@contextmanager
def crag_server(
    work: Path, fake: str, corpus: Path, top_k: int, web: str, store: str | None = None,
    queries: int = 100, max_queue: int = 0, llm_extra: str = "",
) -> Iterator[Server]:
    """`crag ingest` then `crag serve` with a config pointing at the fake; `max_runs` is
    `queries` and `max_queue` 0 unless told; `llm_extra`: more TOML lines for `[llm]`."""
    web_section = (
        f'kind = "local"\ncorpus = "{corpus}"\n'
        if web == "local"
        else f'kind = "tavily"\nbase_url = "{fake}"\napi_key = "tvly-fake-crag"\n'
    )
    port, log = free_port(), work / "crag-server.log"
    config = work / "crag.toml"
    config.write_text(
        f'[index]\npath = "{work / "index"}"\n\n[retriever]\ntop_k = {top_k}\n\n'
        f'[llm]\nbase_url = "{fake}/v1"\napi_key = "sk-fake-crag"\n{llm_extra}\n'
        f"[web_search]\n{web_section}top_k = 5\n"  # the pack asks Tavily for 5 results
        + f'\n[server]\nhost = "127.0.0.1"\nport = {port}\n'
        # Admit the whole load at once, as the pack's harness does: the benchmark measures
        # what one process serves, not crag serve's admission limits (8 runs, 32 queued).
        + f"max_runs = {queries}\nmax_queue = {max_queue}\n"
        + (f'store = "{store}"\n' if store not in (None, "memory") else ""),
        encoding="utf-8",
    )
    subprocess.run(
        [str(CRAG), "--config", str(config), "ingest", str(corpus), "--quiet"], check=True
    )
    if store == "memory":
        code = (
            f"import sys; sys.path.insert(0, {str(HERE)!r}); import throughput; "
            "throughput.serve_bare(sys.argv[1], int(sys.argv[2]))"
        )
        argv = [sys.executable, "-c", code, str(config), str(port)]
        note = "DIAGNOSTIC: a bare WorkflowServer, in-memory store, no crag middleware"
    else:
        argv = [str(CRAG), "--config", str(config), "serve"]
        note = f"crag serve (run store: {store or 'SQLite beside the index, the default'})"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    with log.open("w") as out, process(argv, stdout=out, stderr=subprocess.STDOUT, env=env) as child:
        url = f"http://127.0.0.1:{port}"
        wait_until_up(url + "/health", child, "crag", log)
        yield Server(
            "crag", note, child.pid, url + "/workflows/crag/run",
            lambda q: {"start_event": {"query": q}}, crag_answer,
        )


def pack_python() -> Path:
    """The pack's venv (vs_pack.py makes it) with the server harness's two packages."""
    from vs_pack import ensure_pack_venv

    python = ensure_pack_venv()
    check = subprocess.run([str(python), "-c", "import uvicorn, starlette"], capture_output=True)
    if check.returncode != 0:
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "uvicorn>=0.30", "starlette>=0.37"],
            check=True,
        )
    return python


@contextmanager
def pack_server(work: Path, fake: str, corpus: Path, top_k: int) -> Iterator[Server]:
    port, log = free_port(), work / "pack-server.log"
    argv = [
        str(pack_python()), str(PACK_SERVER), "--port", str(port), "--llm-url", fake,
        "--corpus", str(corpus), "--top-k", str(top_k),
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    with log.open("w") as out, process(argv, stdout=out, stderr=subprocess.STDOUT, env=env) as child:
        url = f"http://127.0.0.1:{port}"
        wait_until_up(url + "/health", child, "pack", log)
        yield Server(
            "pack", "uvicorn + Starlette harness (_pack_server.py)", child.pid, url + "/query",
            lambda q: {"query": q},
            lambda reply: reply.get("answer") if isinstance(reply, dict) else None,
        )


# ---------------------------------------------------------------------------- the load


@dataclass
class Measured:
    name: str
    note: str
    queries: int = 0
    completed: int = 0
    errors: Counter = field(default_factory=Counter)  # message -> count
    latencies: list[float] = field(default_factory=list)
    wall: float = 0.0
    chat_calls: int = 0
    searches: int = 0
    server_cpu: float | None = None
    load: tuple[float, float] = (0.0, 0.0)  # the machine's 1-min load average, before and after

    @property
    def qps(self) -> float:
        return self.completed / self.wall if self.wall else 0.0

    def percentile(self, q: float) -> float:
        return _harness.percentile(self.latencies, q)


async def ask(client: Any, server: Server, question: str) -> tuple[float, str | None]:
    """One query: its latency, and None when answered or what went wrong."""
    started = time.perf_counter()
    try:
        response = await client.post(server.url, json=server.body(question))
        reply = response.json()
    except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
        return time.perf_counter() - started, f"{type(exc).__name__}: {exc}"[:200]
    seconds = time.perf_counter() - started
    answer = server.answer(reply) if response.status_code == 200 else None
    if answer is None or not answer.strip():
        return seconds, f"HTTP {response.status_code}: {json.dumps(reply)[:200]}"
    return seconds, None


async def measure(server: Server, fake: str, questions: list[str], timeout: float) -> Measured:
    import httpx

    out = Measured(server.name, server.note, queries=len(questions))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        await ask(client, server, questions[0])  # untimed warm-up: first-use costs
        before = (await client.get(fake + "/stats")).json()
        cpu, load_before = cpu_seconds(server.pid), os.getloadavg()[0]
        started = time.perf_counter()
        done = await asyncio.gather(*(ask(client, server, q) for q in questions))
        out.wall = time.perf_counter() - started
        after_cpu = cpu_seconds(server.pid)
        out.load = (load_before, os.getloadavg()[0])  # other work on the machine skews q/s
        after = (await client.get(fake + "/stats")).json()
    for seconds, error in done:
        out.latencies.append(seconds)
        if error is None:
            out.completed += 1
        else:
            out.errors[error] += 1
    out.chat_calls = after.get("chat", 0) - before.get("chat", 0)
    out.searches = after.get("search", 0) - before.get("search", 0)
    if cpu is not None and after_cpu is not None:
        out.server_cpu = after_cpu - cpu
    return out


# ---------------------------------------------------------------------------- inputs, report


def load_inputs(n: int) -> tuple[list[str], list[dict[str, str]]]:
    """`n` questions spread over squad-dev (repeating past its 300), and the corpus of
    their gold passages, in question order."""
    rows = _harness.spread(_harness.read_jsonl(QUESTIONS), min(n, 300))
    gold = {r["doc_id"] for r in rows}
    corpus = [
        {"doc_id": p["doc_id"], "title": p["title"], "text": p["text"]}
        for p in _harness.read_jsonl(CORPUS)
        if p["doc_id"] in gold
    ]
    return [rows[i % len(rows)]["question"] for i in range(n)], corpus


def report(results: list[Measured], args, corpus_size: int, web: str) -> str:  # noqa: ANN001
    lines = [
        f"throughput: {args.queries} concurrent queries per system, one server process each; "
        f"fake LLM {args.latency * 1000:.0f} ms per call; top-k {args.top_k}; "
        f"corpus {corpus_size} squad-dev passages",
        "",
        f"{'system':<6} {'queries':>7} {'completed':>9} {'errors':>6} {'wall s':>7} "
        f"{'queries/s':>9} {'p50 s':>6} {'p95 s':>6} {'LLM calls/q':>11} {'searches/q':>10} "
        f"{'server CPU s':>12} {'CPU ms/q':>8}",
    ]
    for m in results:
        per = max(m.queries, 1)
        searches = "local" if m.name == "crag" and web == "local" else f"{m.searches / per:.2f}"
        cpu = "-" if m.server_cpu is None else f"{m.server_cpu:.1f}"
        cpu_per_query = "-" if m.server_cpu is None else f"{1000 * m.server_cpu / per:.0f}"
        lines.append(
            f"{m.name:<6} {m.queries:>7} {m.completed:>9} {sum(m.errors.values()):>6} "
            f"{m.wall:>7.2f} {m.qps:>9.1f} {m.percentile(0.5):>6.2f} {m.percentile(0.95):>6.2f} "
            f"{m.chat_calls / per:>11.2f} {searches:>10} {cpu:>12} {cpu_per_query:>8}"
        )
    lines.append("")
    for m in results:
        lines.append(
            f"{m.name}: served by {m.note}; machine load average {m.load[0]:.1f} before, "
            f"{m.load[1]:.1f} after ({os.cpu_count()} CPUs)"
        )
        for message, count in m.errors.most_common(5):
            lines.append(f"  NOTE: {count} of {m.queries} {m.name} queries failed: {message}")
    expected = args.top_k + 2
    for m in results:
        if m.completed and m.chat_calls != expected * m.queries:
            lines.append(
                f"  NOTE: {m.name} made {m.chat_calls} LLM calls in all, not {expected} per query "
                "(k grades + rewrite + answer; crag skips the answer call when no strip survives)"
            )
    by_name = {m.name: m for m in results}
    if "crag" in by_name and "pack" in by_name:
        crag, pack = by_name["crag"], by_name["pack"]
        if crag.completed and pack.completed:
            ratio = crag.qps / pack.qps
            met = "met" if ratio >= GOAL else "NOT met"
            lines.append(f"ratio: {ratio:.1f}× (crag q/s ÷ pack q/s); goal ≥ {GOAL:.0f}×: {met}")
        if crag.server_cpu is not None and crag.queries:
            per_query = 1000 * crag.server_cpu / crag.queries
            met = "met" if per_query <= GOAL_CPU_MS else "NOT met"
            lines.append(f"crag server CPU: {per_query:.1f} ms per query; goal ≤ {GOAL_CPU_MS:.0f} ms: {met}")
        else:
            lines.append("ratio: - (a system completed no query)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = _harness.parser(__doc__)
    parser.add_argument("--queries", type=int, default=100, help="concurrent queries per system")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per fake LLM call")
    parser.add_argument("--top-k", type=int, default=5, help="chunks retrieved and graded")
    parser.add_argument("--skip-pack", action="store_true", help="measure crag only")
    parser.add_argument(
        "--crag-web", choices=["local", "tavily"], default="local",
        help="crag's web search: BM25 over the corpus (default) or the fake's Tavily endpoint",
    )
    parser.add_argument(
        "--crag-store", default=None, metavar="PATH|memory",
        help="crag serve's [server] store (default: its own, SQLite beside the index); "
        "'memory': a bare WorkflowServer with its in-memory store, to see what storing costs",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="client timeout per query, s")
    args = _harness.parse(parser, smoke={"queries": 5, "skip_pack": True}, argv=argv)
    if args.queries < 1 or args.latency < 0 or args.top_k < 1:
        parser.error("--queries and --top-k must be positive, --latency not negative")
    with _harness.measured(__file__, args) as run:
        results = measure_both(args, run)
        by_name = {m.name: m for m in results}
        run.figures = {m.name: {"queries_per_second": m.qps, "completed": m.completed, "queries": m.queries,
                                "p95_seconds": m.percentile(0.95), "server_cpu_seconds": m.server_cpu}
                       for m in results}
        crag, pack = by_name["crag"], by_name.get("pack")
        run.goal("crag q/s over the pack's", crag.qps / pack.qps if pack and pack.qps else None, at_least=GOAL)
        cpu = 1000 * crag.server_cpu / crag.queries if crag.server_cpu is not None else None
        run.goal("crag server CPU per query, ms", cpu, at_most=GOAL_CPU_MS)
    return 0 if all(m.completed == m.queries for m in results) else 1


def measure_both(args, run: _harness.Run) -> list[Measured]:  # noqa: ANN001
    """crag's server, then the pack's unless --skip-pack, under the same load; prints the report."""
    if args.skip_pack:
        run.skip("the pack", "--skip-pack (its venv needs pip and the network)")
    questions, corpus = load_inputs(args.queries)
    results: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="crag-throughput-") as tmp:
        work = Path(tmp)
        corpus_path = work / "corpus.jsonl"
        corpus_path.write_text("".join(json.dumps(p) + "\n" for p in corpus), encoding="utf-8")
        with fake_server(args.latency, corpus_path) as fake:
            with crag_server(
                work, fake, corpus_path, args.top_k, args.crag_web, args.crag_store, args.queries
            ) as server:
                results.append(asyncio.run(measure(server, fake, questions, args.timeout)))
        if not args.skip_pack:
            with fake_server(args.latency, corpus_path) as fake:
                with pack_server(work, fake, corpus_path, args.top_k) as server:
                    results.append(asyncio.run(measure(server, fake, questions, args.timeout)))
    print(report(results, args, len(corpus), args.crag_web))
    return results


if __name__ == "__main__":
    sys.exit(main())
