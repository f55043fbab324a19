"""Time to the first answer token: how soon a streamed answer starts, against what it must wait for.

    .venv/bin/python benchmarks/streaming.py [--questions 20] [--latency 0.05] [--data ../shared/data] [--smoke]

A loopback OpenAI-compatible server (tests/support/loopback.py) answers every chat call after
`--latency` seconds: grades ("9": every question is answered from the index), rewrites, and
the answer, which it streams a word per chunk (the first chunk leaves after the latency). crag
asks SQuAD dev questions one at a time over an index of their passages, reading each run's
event stream (`handler.stream_events()`), as `crag ask` and the OpenAI endpoint do.

For each run it takes:
- `first token`: from the run's start to the first `AnswerDeltaEvent`;
- `critical path`: from the run's start until the synthesize step started (retrieval and
  grading, whose model calls run concurrently: one round trip), read from the run's trace;
- `overhead`: first token - critical path - the model's first-token latency (`--latency`):
  what crag adds between the answer's first chunk leaving the model and the reader seeing it,
  plus the synthesize step's own start. Goal: at most 10 ms.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _harness

sys.path.insert(0, str(_harness.TESTS))

from support.loopback import LoopbackServer, openai_chat  # noqa: E402

from crag import Settings  # noqa: E402
from crag.events import AnswerDeltaEvent  # noqa: E402
from crag.ingestion import ingest  # noqa: E402
from crag.workflows.factory import build_workflow  # noqa: E402

GOAL_MS = 10.0


def _reply(prompt: str) -> str:
    if "Rate how relevant" in prompt:
        return "9"
    if prompt.startswith("Rewrite the question"):
        return "search words"
    return "The answer, from the first passage, is given here in a few words [1]."


async def _one(workflow, question: str) -> tuple[float, float]:  # noqa: ANN001
    started = time.perf_counter()
    handler = workflow.run(query=question)
    first = None
    async for event in handler.stream_events():
        if first is None and isinstance(event, AnswerDeltaEvent) and event.delta.strip():
            first = time.perf_counter() - started
    result = await handler
    synthesize = next(s for s in result.trace.steps if s.name == "synthesize")
    return first if first is not None else float("nan"), synthesize.started


def main() -> None:
    cli = _harness.parser(__doc__)
    cli.add_argument("--questions", type=int, default=20)
    cli.add_argument("--latency", type=float, default=0.05, help="seconds per model call")
    cli.add_argument("--data", type=Path, default=_harness.DATA)
    args = _harness.parse(cli, smoke={"questions": 3})
    with _harness.measured(__file__, args) as run:
        run.figures = measure(args)
        run.goal("first-token overhead, median ms", run.figures["overhead_ms"]["median"], at_most=GOAL_MS)


def measure(args) -> dict[str, dict[str, float]]:  # noqa: ANN001
    """Each measure's median and p90 in ms, over `args.questions` streamed runs."""
    data = args.data
    rows = [json.loads(line) for line in (data / "squad-dev.jsonl").read_text().splitlines()[: args.questions]]
    wanted = {r["doc_id"] for r in rows}
    with tempfile.TemporaryDirectory(prefix="crag-streaming-") as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        corpus.write_text("".join(line + "\n" for line in (data / "squad-dev-corpus.jsonl").read_text().splitlines()
                                  if json.loads(line)["doc_id"] in wanted), encoding="utf-8")
        ingest([corpus], Path(tmp) / "index")
        with LoopbackServer(openai_chat(_reply, delay=lambda prompt: args.latency)) as server:
            settings = Settings.load(env={"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-bench"},
                                     index={"path": Path(tmp) / "index"}, decomposer={"kind": "rules"},
                                     cache={"enabled": False})
            workflow = build_workflow(settings)

            async def run_all() -> list[tuple[float, float]]:
                await _one(workflow, rows[0]["question"])  # warm: connections, first imports
                return [await _one(workflow, r["question"]) for r in rows]

            timings = asyncio.run(run_all())
    first = [f for f, _ in timings]
    critical = [c for _, c in timings]
    overhead = [1000 * (f - c - args.latency) for f, c in timings]
    print(f"{len(timings)} questions, model {1000 * args.latency:.0f} ms per call (first token after it)")
    print("| measure | median ms | p90 ms |\n|---|---:|---:|")
    out = {}
    for name, values in (("first token", [1000 * f for f in first]), ("critical path", [1000 * c for c in critical]),
                         ("overhead", overhead)):
        ordered = sorted(values)
        median, p90 = statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]
        print(f"| {name} | {median:.1f} | {p90:.1f} |")
        out[f"{name.replace(' ', '_')}_ms"] = {"median": median, "p90": p90}
    return out  # goal: overhead, first token - critical path - the model's first token


if __name__ == "__main__":
    main()
