"""Cold start of `crag mcp`: from launching it to the `initialize` answer, and to a first `ask`.

    python benchmarks/mcp_cold_start.py [--sizes sample,1000,100000] [--runs 5]
                                        [--data ../shared/data] [--out benchmarks/out/cold_start]

What an MCP client (Claude Desktop, VS Code) waits for: it launches `crag mcp --index PATH`,
sends `initialize`, then calls a tool. Each run is a new process, driven by the official `mcp`
client over stdio (the initialize handshake, `mode="legacy"`, as today's clients do), after
one untimed run that warms the page cache. "sample" is the bundled handbook (4 chunks,
ingested into a temporary folder); a number is cold_start.py's corpus of that many chunks
(built there with `crag ingest`, or reused). The question for "sample" is the warranty one;
for the corpora, cold_start.py's. Times are wall seconds, median of `--runs`.
Goals: initialize <= 1.0 s, first ask <= 1.5 s, at 100k chunks.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client, StdioServerParameters

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
SAMPLE_QUESTION = "What warranty does Lumen give on the Helio H10?"


async def one_run(index: Path, question: str) -> tuple[float, float]:
    """Seconds from launch to the initialize answer, and to the first ask's answer."""
    import cold_start

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "crag.app.cli", "mcp", "--index", str(index)],
        env=cold_start.child_env(),
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="sample,1000", help="'sample' and/or chunk counts, comma-separated"
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--data", type=Path, default=PROJECT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=HERE / "out" / "cold_start")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import cold_start

    print("| index | chunks | initialize s | first ask s |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="crag-mcp-cold-") as tmp:
        for size in args.sizes.split(","):
            if size == "sample":
                index, question, chunks = sample_index(Path(tmp)), SAMPLE_QUESTION, 4
            else:
                args.out.mkdir(parents=True, exist_ok=True)
                folder, _, chunks = cold_start.prepare(
                    int(size), args.out, args.data, rebuild=False
                )
                index, question = (
                    folder / "index",
                    (folder / "question.txt").read_text(encoding="utf-8"),
                )
            runs = [asyncio.run(one_run(index, question)) for _ in range(args.runs + 1)][1:]
            init = statistics.median(r[0] for r in runs)
            ask = statistics.median(r[1] for r in runs)
            print(f"| {size} | {chunks:,} | {init:.3f} | {ask:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
