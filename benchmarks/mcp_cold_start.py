"""Cold start of `crag mcp`: from launching it to the `initialize` answer, and to a first `ask`.

    python benchmarks/mcp_cold_start.py [--sizes sample,1000,100000] [--runs 5]
                                        [--data ../shared/data] [--out benchmarks/out/cold_start] [--smoke]

What an MCP client (Claude Desktop, VS Code) waits for: it launches `crag mcp --index PATH`,
sends `initialize`, then calls a tool. Each run is a new process, driven by the official `mcp`
client over stdio (the initialize handshake, `mode="legacy"`, as today's clients do), after
one untimed run that warms the page cache. "sample" is the bundled handbook (4 chunks,
ingested into a temporary folder); a number is cold_start.py's corpus of that many chunks
(built there with `crag ingest`, or reused). The question for "sample" is the warranty one;
for the corpora, cold_start.py's. Times are wall seconds, median of `--runs`.
Goals: initialize <= 1.0 s, first ask <= 1.5 s, at 100k chunks. At smoke size, the sample
once (`--runs 0`: the untimed run alone).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _harness
import cold_start
from mcp import Client, StdioServerParameters

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
SAMPLE_QUESTION = "What warranty does Lumen give on the Helio H10?"


async def one_run(index: Path, question: str) -> tuple[float, float]:
    """Seconds from launch to the initialize answer, and to the first ask's answer."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "crag.app.cli", "mcp", "--index", str(index)],
        env=_harness.offline_env(),
    )
    start = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        initialized = time.perf_counter() - start
        result = await client.call_tool("ask", {"question": question})
        answered = time.perf_counter() - start
    if result.is_error:
        raise SystemExit(f"ask failed on {index}: {result.content}")
    return initialized, answered


def sample_index(folder: Path) -> Path:
    from crag.ingestion import ingest

    ingest([PROJECT / "src" / "crag" / "sample_data" / "docs"], folder / "index")
    return folder / "index"


def main() -> int:
    cli = _harness.parser(__doc__)
    cli.add_argument("--sizes", default="sample,1000", help="'sample' and/or chunk counts, comma-separated")
    cli.add_argument("--runs", type=int, default=5)
    cli.add_argument("--data", type=Path, default=_harness.DATA)
    cli.add_argument("--out", type=Path, default=HERE / "out" / "cold_start")
    args = _harness.parse(cli, smoke={"sizes": "sample", "runs": 0})

    print("| index | chunks | initialize s | first ask s |")
    print("|---|---:|---:|---:|")
    with _harness.measured(__file__, args) as run, tempfile.TemporaryDirectory(prefix="crag-mcp-cold-") as tmp:
        for size in args.sizes.split(","):
            if size == "sample":
                index, question, chunks = sample_index(Path(tmp)), SAMPLE_QUESTION, 4
            else:
                args.out.mkdir(parents=True, exist_ok=True)
                folder, _, chunks, _ = cold_start.prepare(int(size), args.out, args.data, rebuild=False)
                index, question = folder / "index", (folder / "question.txt").read_text(encoding="utf-8")
            runs = [asyncio.run(one_run(index, question)) for _ in range(args.runs + 1)]
            runs = runs[1:] or runs  # --runs 0 (smoke size): the untimed run alone
            init = statistics.median(r[0] for r in runs)
            ask = statistics.median(r[1] for r in runs)
            print(f"| {size} | {chunks:,} | {init:.3f} | {ask:.3f} |", flush=True)
            run.figures[size] = {"chunks": chunks, "initialize_seconds": init, "first_ask_seconds": ask}
        at_100k = run.figures.get("100000", {})
        run.goal("initialize answered at 100k, s", at_100k.get("initialize_seconds"), at_most=1.0)
        run.goal("first ask answered at 100k, s", at_100k.get("first_ask_seconds"), at_most=1.5)
    return 0

if __name__ == "__main__":
    sys.exit(main())
