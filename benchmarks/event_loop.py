"""Event-loop responsiveness: 20 offline runs at once on one loop, a 10 ms timer beside them.

    python benchmarks/event_loop.py [--chunks 10000] [--runs 20] [--rounds 5]
        [--executor pool|to_thread] [--workers N] [--switch-interval SECONDS] [--no-settle-heap]
        [--out benchmarks/out/event_loop] [--smoke]

The index is scale.py's corpus (`make_corpus`: shuffled sentences of the shared dev corpora,
four per document, one chunk each), ingested once into benchmarks/out/event_loop/<chunks>/ and
reused (at smoke size, into a temporary folder). The workflow is `build_workflow` with the offline defaults (hybrid retrieval, lexical
grader, strip refiner, keyword rewriter, local web search over the sample "web",
extractive synthesis): everything is loaded before the first run. Then `crag.settle_heap()`,
as a process that serves runs calls it (`crag serve` does); `--no-settle-heap` leaves the
garbage collector as `build_workflow` leaves it, as in a notebook.

A task on the same loop asks to wake every 10 ms; its lateness (woken minus asked) is what
any other request on a server would wait for. Printed for one run and for `--runs` runs
started together, over `--rounds` rounds, after one untimed run. Then the median wall time of one run and of `--runs`
runs at once, offline and with a fixed-latency fake model (`crag.testing.FakeLLM`) grading,
rewriting and synthesizing: with the loop free, the runs' model calls overlap and 20 runs
take little longer than one. Last, the garbage collector's passes on the loop's thread over
all of that, by generation, and the CPU time of the full ones: on a busy machine the steadier
figure.

`--executor to_thread` sends the steps' work to asyncio's default executor (up to cores + 4
threads) instead of crag's pool of one thread per core, to compare the two.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import _harness
from scale import make_corpus, questions

import crag
from crag import Settings, _offload
from crag.index import ChunkIndex
from crag.ingestion import ingest
from crag.steps.grading import LexicalEvaluator, LLMGrader
from crag.steps.rewriting import LLMRewriter
from crag.steps.synthesis import LLMSynthesizer
from crag.testing import FakeLLM
from crag.workflows.factory import build_workflow

OUT = Path(__file__).resolve().parent / "out" / "event_loop"
WEB = Path(crag.__file__).parent / "sample_data" / "web.jsonl"
TICK = 0.010
MODEL_LATENCY = 0.2


def index_for(chunks: int, data: Path, out: Path) -> Path:
    """The benchmark's index of `chunks` chunks in `out`, built on first use and reused after."""
    folder = out / str(chunks)
    try:
        if (folder / "corpus.jsonl").exists() and len(ChunkIndex.load(folder / "index")):
            return folder / "index"
    except Exception:  # noqa: BLE001 - missing, or written in an older format: build it again
        pass
    folder.mkdir(parents=True, exist_ok=True)
    make_corpus(data, chunks, folder / "corpus.jsonl")
    ingest([folder / "corpus.jsonl"], folder / "index")  # the defaults: a record at a time
    return folder / "index"


async def lateness_during(work: Callable[[], Awaitable[object]]) -> list[float]:
    """How late (seconds) each 10 ms tick woke while `work()` ran on the same loop."""
    loop = asyncio.get_running_loop()
    late: list[float] = []
    done = False

    async def ticker() -> None:
        while not done:
            asked = loop.time() + TICK
            await asyncio.sleep(TICK)
            late.append(max(loop.time() - asked, 0.0))

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker is waiting before the work starts
    try:
        await work()
    finally:
        done = True
        await task
    return late


@contextmanager
def collections_counted(figures: dict[str, float]) -> Iterator[None]:
    """Count the garbage collector's passes on this thread (the loop's) while the block runs,
    by generation, and the thread CPU time of the full ones: the loop waits for all of them,
    and CPU time counts little of what other processes on a busy machine do."""
    thread = threading.current_thread()
    passes = [0, 0, 0]
    full_cpu = [0.0]
    started = [0.0]

    def note(phase: str, info: dict) -> None:
        if threading.current_thread() is not thread:
            return
        if phase == "start":
            started[0] = time.thread_time()
            return
        passes[info["generation"]] += 1
        if info["generation"] == 2:
            full_cpu[0] += time.thread_time() - started[0]

    gc.callbacks.append(note)
    try:
        yield
    finally:
        gc.callbacks.remove(note)
        for generation, count in enumerate(passes):
            figures[f"gc_passes_gen{generation}"] = count
        figures["gc_full_passes_cpu_ms"] = 1000 * full_cpu[0]


def describe(late: list[float]) -> tuple[float, float]:
    ms = sorted(x * 1000 for x in late)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else 0.0
    return (ms[-1] if ms else 0.0), p99


async def wall(work: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await work()
    return time.perf_counter() - start


async def main_async(args: argparse.Namespace, run: _harness.Run, out: Path) -> None:
    index = ChunkIndex.load(index_for(args.chunks, args.data, out))
    settings = Settings.load(env={}, index={"path": index.path}, web_search={"corpus": WEB})
    offline = build_workflow(settings, index=index)
    fake = FakeLLM(reply=lambda prompt: "7" if "rate" in prompt.lower() else "Answer [1].", latency=MODEL_LATENCY)
    with_model = build_workflow(
        settings,
        index=index,
        grader=LLMGrader(fake, fallback=LexicalEvaluator(index.term_stats)),
        rewriter=LLMRewriter(fake),
        synthesizer=LLMSynthesizer(fake),
    )
    if args.settle_heap:
        crag.settle_heap()
    asked = questions(args.data, args.runs)

    def runs(workflow: object, count: int) -> Callable[[], Awaitable[object]]:
        return lambda: asyncio.gather(*(workflow.run(query=q) for q in asked[:count]))  # type: ignore[attr-defined]

    await runs(offline, 1)()  # untimed: first-call costs outside crag (allocators, caches)
    await runs(with_model, 1)()
    figures: dict[str, float] = {}
    collections: dict[str, float] = {}
    with collections_counted(collections):
        for count, label in ((1, "1_run"), (args.runs, f"{args.runs}_runs")):
            late: list[float] = []
            for _ in range(args.rounds):  # one round is a few dozen ticks: too few for a p99
                late += await lateness_during(runs(offline, count))
            late_max, late_p99 = describe(late)
            figures[f"timer_late_max_ms_{label}"] = late_max
            figures[f"timer_late_p99_ms_{label}"] = late_p99
        for name, workflow in (("offline", offline), ("fake_model", with_model)):
            for count, label in ((1, "1_run"), (args.runs, f"{args.runs}_runs")):
                times = [await wall(runs(workflow, count)) for _ in range(args.rounds)]
                figures[f"wall_ms_{label}_{name}"] = 1000 * statistics.median(times)
    figures.update(collections)
    print(f"chunks: {len(index)}  executor: {args.executor} ({_offload.WORKERS} workers"
          f"{'' if args.executor == 'pool' else ', ignored'})  model latency: {MODEL_LATENCY * 1000:.0f} ms"
          f"  heap settled: {'yes' if args.settle_heap else 'no'}")
    for key, value in figures.items():
        print(f"{key}: {value:.1f}")
    run.figures = figures
    run.goal(f"timer lateness with {args.runs} runs, ms", figures[f"timer_late_max_ms_{args.runs}_runs"], at_most=20)


def main() -> int:
    cli = _harness.parser(__doc__)
    cli.add_argument("--chunks", type=int, default=10_000)
    cli.add_argument("--runs", type=int, default=20)
    cli.add_argument("--rounds", type=int, default=5, help="repetitions of each measurement")
    cli.add_argument("--data", type=Path, default=_harness.DATA)
    cli.add_argument("--out", type=Path, default=OUT, help="where the index is kept, one folder per size")
    cli.add_argument("--executor", choices=("pool", "to_thread"), default="pool")
    cli.add_argument("--workers", type=int, default=_offload.WORKERS, help="threads in crag's pool")
    cli.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval, seconds")
    cli.add_argument("--no-settle-heap", dest="settle_heap", action="store_false",
                     help="leave the garbage collector alone, as a library user's process would")
    args = _harness.parse(cli, smoke={"chunks": 200, "runs": 3, "rounds": 1, "out": None})
    _offload.WORKERS = args.workers
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    if args.executor == "to_thread":
        _offload._executor = lambda: None  # type: ignore[assignment] - run_in_executor(None): asyncio's
    with _harness.measured(__file__, args) as run, tempfile.TemporaryDirectory(prefix="crag-loop-") as tmp:
        asyncio.run(main_async(args, run, args.out or Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
