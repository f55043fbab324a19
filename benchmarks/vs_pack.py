"""Wall time per query: crag vs `llama-index-packs-corrective-rag` 0.3.1, with a fake LLM.

    .venv/bin/python benchmarks/vs_pack.py [--latency 0.05] [--repeats 5] [--quick] [--skip-pack] [--smoke]

What is compared. Both systems answer the same SQuAD questions over the same fixed
retrieved chunks (k = 5, 10, 20; a retriever that returns the same k passages whatever
the query), with the same fake chat model and the same fake web search:

* the fake LLM (`FakeChatLLM` in `_pack_driver.py`, one class for both sides) waits
  `--latency` seconds per call (`asyncio.sleep` when called async, `time.sleep` when
  called sync) and replies "no" to every grading prompt, so both take the web path:
  crag reads "no" as relevance 0.0, hence Incorrect -> rewrite -> web search -> refine
  the web results -> synthesize; the pack web-searches whenever any chunk is "no" and
  then answers from the web text with a one-shot `SummaryIndex` query engine.
  LLM calls per query: k grades + 1 rewrite + 1 answer, on both sides (checked).
* web search returns the same five passages on both sides, with no latency: the
  question's gold passage and four fixed others. crag's refiner keeps its best strips
  whatever their score (`min_score=0`), so crag always asks the LLM for the answer too.

The pack pins llama-index-core < 0.13, so it runs in its own virtual environment
(`benchmarks/.venv-pack/`, created and pip-installed on first use, reused after) through
`_pack_driver.py` in a subprocess; that script documents the compatibility shim the pack
needs today (a `Context.data` dict) and how its components are substituted. crag runs
in-process, in the interpreter running this script. Each side first runs every question
once untimed (warm-up); the table reports the median over `--repeats` questions per k.

Data: passages from ../shared/data/squad-dev-corpus.jsonl, questions from
../shared/data/squad-dev.jsonl (paths relative to the repository root); nothing is copied.
At smoke size: one question per k, crag's side only (the pack's venv needs pip and the network).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _harness
from _pack_driver import FakeChatLLM, warmup_cases  # shared with the pack side
from llama_index.core.schema import NodeWithScore, TextNode

from crag import CorrectiveRAGWorkflow, CragResult, Verdict
from crag.steps.grading import LexicalEvaluator, LLMGrader
from crag.steps.refining import StripRefiner
from crag.steps.rewriting import LLMRewriter
from crag.steps.synthesis import LLMSynthesizer
from crag.text import TermStats

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = _harness.DATA
CORPUS = DATA / "squad-dev-corpus.jsonl"
QUESTIONS = DATA / "squad-dev.jsonl"
PACK_VENV = HERE / ".venv-pack"
PACK_REQUIREMENT = "llama-index-packs-corrective-rag==0.3.1"
PACK_DRIVER = HERE / "_pack_driver.py"
K_VALUES = (5, 10, 20)
WEB_DOCS = 5  # the pack asks Tavily for max_results=5
GOAL_RATIO_K5 = 0.30  # crag's median at k = 5 over the pack's
GOAL_OVER_LIMIT = 1.1  # crag's median at each k over the physical limit

Passage = dict[str, str]


# ---------------------------------------------------------------------------- inputs


def pick_chunks(
    question: dict[str, Any], corpus: Sequence[dict[str, Any]], k: int
) -> list[Passage]:
    """The question's own article's passages first, then the rest of the corpus in order."""
    own = [p for p in corpus if p["title"] == question["title"]]
    rest = [p for p in corpus if p["title"] != question["title"]]
    return [{"id": p["doc_id"], "title": p["title"], "text": p["text"]} for p in (own + rest)[:k]]


def pick_web_docs(question: dict[str, Any], corpus: Sequence[dict[str, Any]]) -> list[Passage]:
    """Fixed "web" results with made-up URLs: the question's gold passage (the web finds
    the answer), then the corpus's last passages."""
    gold = [p for p in corpus if p["doc_id"] == question["doc_id"]]
    others = [p for p in corpus[-WEB_DOCS:] if p["doc_id"] != question["doc_id"]]
    return [
        {
            "id": p["doc_id"],
            "title": p["title"],
            "url": f"https://example.org/{p['doc_id']}",
            "text": p["text"],
        }
        for p in (gold + others)[:WEB_DOCS]
    ]


# ---------------------------------------------------------------------------- crag side


class FixedRetriever:
    """Returns the same chunks for every query."""

    def __init__(self, chunks: Sequence[Passage]) -> None:
        self.nodes = [
            NodeWithScore(
                node=TextNode(id_=c["id"], text=c["text"], metadata={"title": c["title"]}),
                score=1.0,
            )
            for c in chunks
        ]

    async def retrieve(self, query: str) -> list[NodeWithScore]:
        return list(self.nodes)


class FixedWebSearch:
    """Returns the same web documents for every query, with no network."""

    def __init__(self, docs: Sequence[Passage]) -> None:
        self.nodes = [
            NodeWithScore(
                node=TextNode(
                    id_=f"web:{d['url']}",
                    text=d["text"],
                    metadata={"title": d["title"], "url": d["url"], "kind": "web"},
                ),
                score=1.0 / (i + 1),
            )
            for i, d in enumerate(docs)
        ]
        self.searches = 0

    async def search(self, query: str) -> list[NodeWithScore]:
        self.searches += 1
        return list(self.nodes)


async def time_crag(
    cases: Sequence[dict[str, Any]],
    stats: TermStats,
    latency: float,
    grader_concurrency: int | None,
) -> list[dict[str, Any]]:
    """Run crag once per case, after the untimed warm-up runs; wall time, calls and step timings."""
    llm = FakeChatLLM(latency=latency)
    evaluator = LexicalEvaluator(stats)
    extra = {} if grader_concurrency is None else {"concurrency": grader_concurrency}
    grader = LLMGrader(llm, fallback=evaluator, **extra)

    async def run_one(case: dict[str, Any]) -> dict[str, Any]:
        search = FixedWebSearch(case["web_docs"])
        workflow = CorrectiveRAGWorkflow(
            retriever=FixedRetriever(case["chunks"]),
            grader=grader,
            # min_score=0: always keep the best strips, so crag, like the pack, always asks
            # the LLM for the answer (with no strip kept it answers without a call).
            refiner=StripRefiner(evaluator, min_score=0.0),
            rewriter=LLMRewriter(llm),
            web_search=search,
            synthesizer=LLMSynthesizer(llm),
            upper=0.6,
            lower=0.35,
        )
        calls = llm.calls
        started = time.perf_counter()
        result: CragResult = await workflow.run(query=case["question"])
        seconds = time.perf_counter() - started
        if result.verdict is not Verdict.INCORRECT:
            raise RuntimeError(
                f"crag took the {result.verdict.value} path; the benchmark expects incorrect"
            )
        return {
            "seconds": seconds,
            "llm_calls": llm.calls - calls,
            "web_searches": search.searches,
            "steps": dict(result.timings),
        }

    for case in warmup_cases(cases):
        await run_one(case)
    return [await run_one(case) for case in cases]


# ---------------------------------------------------------------------------- pack side


def ensure_pack_venv() -> Path:
    """The pack's interpreter; creates `benchmarks/.venv-pack` and installs the pack if needed."""
    python = PACK_VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    check = [
        str(python),
        "-c",
        "import importlib.metadata as m; print(m.version('llama-index-packs-corrective-rag'))",
    ]
    if python.exists():
        found = subprocess.run(check, capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == PACK_REQUIREMENT.split("==")[1]:
            return python
    print(
        f"setting up {PACK_VENV.relative_to(REPO)} with {PACK_REQUIREMENT} (once)...",
        file=sys.stderr,
    )
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PACK_VENV)], check=True)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            PACK_REQUIREMENT,
        ],
        check=True,
    )
    return python


def time_pack(
    python: Path, cases: Sequence[dict[str, Any]], latency: float
) -> list[dict[str, Any]]:
    """Run the pack's workflow in its venv via `_pack_driver.py`; one result per case."""
    spec = {"latency": latency, "cases": list(cases)}
    done = subprocess.run(
        [str(python), str(PACK_DRIVER)],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        cwd=HERE,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise RuntimeError(f"the pack driver failed with exit status {done.returncode}")
    out = json.loads(done.stdout)
    return [
        {"seconds": s, "llm_calls": c, "web_searches": w}
        for s, c, w in zip(out["seconds"], out["llm_calls"], out["web_searches"], strict=True)
    ]


# ---------------------------------------------------------------------------- report


def median_of(runs: Sequence[dict[str, Any]], k: int, key: str = "seconds") -> float:
    return statistics.median(r[key] for r in runs if r["k"] == k)


def calls_of(runs: Sequence[dict[str, Any]], k: int) -> str:
    seen = sorted({(r["llm_calls"], r["web_searches"]) for r in runs if r["k"] == k})
    return ",".join(f"{c}/{w}" for c, w in seen)


def report(
    crag: Sequence[dict[str, Any]],
    pack: Sequence[dict[str, Any]],
    args: argparse.Namespace,
    measured_s: float,
    run: _harness.Run,
) -> None:
    """The tables, and the goals on `run`; `pack` is empty with --skip-pack."""
    default = inspect.signature(LLMGrader).parameters["concurrency"].default
    concurrency = args.grader_concurrency or default
    where = f"pack in {PACK_VENV.relative_to(REPO)} (subprocess)" if pack else "pack not run"
    print(
        f"latency {args.latency * 1000:.0f} ms per LLM call; {args.repeats} questions per k; "
        f"crag in-process, {where}; measured in {measured_s:.1f} s"
    )
    print("median wall time per query (s); calls = LLM calls / web searches per query")
    header = ["crag", "pack", "crag/pack", "crag calls", "pack calls"]
    print(f"{'k':>3}  " + "  ".join(f"{h:>10}" for h in header))
    for k in K_VALUES:
        c = median_of(crag, k)
        p = median_of(pack, k) if pack else math.nan
        cells = [f"{c:.3f}", f"{p:.3f}", f"{c / p:.3f}", calls_of(crag, k), calls_of(pack, k) if pack else "-"]
        print(f"{k:>3}  " + "  ".join(f"{cell:>10}" for cell in cells))

    print(f"\ncrag step medians (s); LLMGrader concurrency = {concurrency}")
    steps = ["retrieve", "grade", "rewrite", "web_search", "refine_web", "synthesize"]
    print(f"{'k':>3}  " + "  ".join(f"{s:>10}" for s in steps) + f"  {'ideal grade':>11}")
    for k in K_VALUES:
        rows = [r["steps"] for r in crag if r["k"] == k]
        medians = [statistics.median(row.get(s, 0.0) for row in rows) for s in steps]
        ideal = math.ceil(k / concurrency) * args.latency  # waves of `concurrency` concurrent calls
        print(f"{k:>3}  " + "  ".join(f"{m:10.3f}" for m in medians) + f"  {ideal:11.3f}")

    for k in K_VALUES:
        if calls_of(crag, k) != f"{k + 2}/1" or (pack and calls_of(crag, k) != calls_of(pack, k)):
            expected = f"the expected {k + 2} LLM calls and 1 search"
            print(f"WARNING: at k={k} the two sides did not both make {expected}")
    ratio_k5 = median_of(crag, 5) / median_of(pack, 5) if pack else None
    if pack:
        print(f"\npack k20/k5: {median_of(pack, 20) / median_of(pack, 5):.3f}")
        print(f"ratio_k5: {ratio_k5:.3f}")
    # The physical limit: two dependent model round trips (grade ∥ rewrite, then synthesize).
    limit = GOAL_OVER_LIMIT * 2 * args.latency
    run.figures = {"crag_seconds": {k: median_of(crag, k) for k in K_VALUES},
                   "pack_seconds": {k: median_of(pack, k) for k in K_VALUES} if pack else None,
                   "ratio_k5": ratio_k5}
    run.goal("crag k20/k5", median_of(crag, 20) / median_of(crag, 5), at_most=1.3)
    run.goal("crag over the pack at k = 5", ratio_k5, at_most=GOAL_RATIO_K5)
    run.goal(f"crag's slowest k over two round trips, s ({GOAL_OVER_LIMIT}x {2 * args.latency:g} s)",
             max(median_of(crag, k) for k in K_VALUES), at_most=limit)


def main(argv: Sequence[str] | None = None) -> None:
    parser = _harness.parser(__doc__)
    parser.add_argument(
        "--latency", type=float, default=0.05, help="seconds per fake LLM call (default 0.05)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="questions per k (default 5)")
    parser.add_argument("--quick", action="store_true", help="2 questions per k")
    parser.add_argument("--skip-pack", action="store_true", help="crag's side only")
    parser.add_argument(
        "--grader-concurrency",
        type=int,
        default=None,
        help="crag LLMGrader concurrency (default: crag's default)",
    )
    args = _harness.parse(parser, smoke={"repeats": 1, "skip_pack": True}, argv=argv)
    if args.quick:
        args.repeats = 2

    corpus = _harness.read_jsonl(CORPUS)
    questions = _harness.spread(_harness.read_jsonl(QUESTIONS), args.repeats)
    cases = [
        {
            "k": k,
            "question": q["question"],
            "chunks": pick_chunks(q, corpus, k),
            "web_docs": pick_web_docs(q, corpus),
        }
        for k in K_VALUES
        for q in questions
    ]

    with _harness.measured(__file__, args) as run:
        started = time.perf_counter()
        pack = []
        if args.skip_pack:
            run.skip("the pack", "--skip-pack (its venv needs pip and the network)")
        else:
            python = ensure_pack_venv()
            started = time.perf_counter()
            pack_runs = time_pack(python, cases, args.latency)
            pack = [dict(case, **r) for case, r in zip(cases, pack_runs, strict=True)]
        stats = TermStats.from_texts(p["text"] for p in corpus)
        crag_runs = asyncio.run(time_crag(cases, stats, args.latency, args.grader_concurrency))
        crag = [dict(case, **r) for case, r in zip(cases, crag_runs, strict=True)]
        report(crag, pack, args, time.perf_counter() - started, run)

if __name__ == "__main__":
    main()
