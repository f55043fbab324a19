"""Cold start: `crag --help`, `import crag` and one `crag ask` in fresh processes at 1k-100k chunks.

    python benchmarks/cold_start.py [--sizes 1000,10000,100000] [--runs 3] [--rebuild]
                                    [--skip-install] [--out benchmarks/out/cold_start] [--smoke]

What a user waits for before the first answer. Every command runs `--runs` times, each in a
new process, after one untimed run that warms the page cache and, for `ask`, checks that the
index is accepted (`--runs 0`, the smoke size: once, unwarmed): "cold" means a new
interpreter, not an empty disk cache. Times are wall
seconds and peak RSS of that one child (os.wait4), started by `_harness.launch`'s small
launcher: spawned from here, `import crag` would report this script's peak.

Corpora are scale.py's (`make_corpus`: shuffled sentences of the shared dev corpora, four per
document, one chunk each), made in a child so this process stays small, and built with
`crag ingest` into benchmarks/out/cold_start/<size>/, with the default settings (a .jsonl is
read a record at a time). An index is reused while its stamp
matches and `crag ask` accepts it; one that `crag ask` rejects (exit 2, asking to re-ingest:
the on-disk format changed) is rebuilt, as is every one with --rebuild. The question is the
first sentence of document d0, which every corpus shares (same seed), so each size answers
it from the same chunk along the same path. Children run offline with no API keys.

install_mb is the site-packages of a new venv after `pip install` of this checkout with the
default extras. MB = 2**20 bytes throughout. Goals on a 2-core machine: `crag --help` <= 0.3 s;
cold ask at 100k <= 1.5x cold ask at 1k and <= 3 s; peak RSS at 100k <= 400 MB; install <= 400 MB.
At smoke size the indexes are built in a temporary folder and the install is not measured.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _harness
from _harness import MB, Child, launch, offline_env

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
BIN = Path(sys.executable).parent

# scale.make_corpus into argv[4]/corpus.jsonl; document d0's first sentence as the question.
_CORPUS = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from scale import make_corpus
from crag.text import sentences
data, size, folder = Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
make_corpus(data, size, folder / "corpus.jsonl")
with open(folder / "corpus.jsonl", encoding="utf-8") as f:
    first = sentences(json.loads(f.readline())["text"])[0]
(folder / "question.txt").write_text(first.rstrip(".!?") + "?", encoding="utf-8")
"""

# Sizes of the installed distributions (from their RECORD files), largest first.
_DISTRIBUTIONS = """
import importlib.metadata as m, json, os
sizes = {}
for d in m.distributions():
    paths = (d.locate_file(f) for f in d.files or ())
    sizes[d.metadata["Name"]] = sum(os.path.getsize(p) for p in paths if os.path.isfile(p))
print(json.dumps(sorted(sizes.items(), key=lambda kv: -kv[1])))
"""


def repeat(argv: list[str], runs: int, cwd: Path, warm: bool = True) -> list[Child]:
    """`runs` timed runs, after an untimed one unless `warm` is False (`prepare` ran it); every
    run must succeed. `runs` 0 (smoke size): one run, reported as it is."""
    out = []
    for _ in range(max(runs, 1) + (warm and runs > 0)):
        run = launch(argv, cwd)
        if run.code:
            raise SystemExit(f"{' '.join(argv)} exited {run.code}: {run.stderr.strip()[-2000:]}")
        out.append(run)
    return out[-max(runs, 1):]


def label(size: int) -> str:
    return f"{size // 1000}k" if size % 1000 == 0 else str(size)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def data_stamp(data: Path) -> dict[str, list[int]]:
    files = sorted(data.glob("*-corpus.jsonl"))
    return {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in files}


def is_current(stamp: Path, size: int, data: Path) -> bool:
    """Whether the index beside `stamp` came from this corpus (`crag ask` judges its format)."""
    if not stamp.exists():
        return False
    built = json.loads(stamp.read_text(encoding="utf-8"))
    return built.get("size") == size and built.get("data") == data_stamp(data)


def build(size: int, folder: Path, data: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", _CORPUS, str(HERE), str(data), str(size), str(folder)],
                   env=offline_env(), check=True)
    made = time.perf_counter()
    say(f"{label(size)}: corpus in {made - start:.1f} s; ingesting ...")
    env = offline_env()
    done = subprocess.run([str(BIN / "crag"), "ingest", "corpus.jsonl", "--index", "index", "-q"],
                          cwd=folder, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"crag ingest failed at {label(size)}: {done.stderr.strip()}")
    seconds = time.perf_counter() - made
    found = re.search(r"(\d+) chunk\(s\) in", done.stdout)
    chunks = int(found.group(1)) if found else size
    rate = chunks / seconds
    say(f"{label(size)}: ingested {chunks:,} chunks in {seconds:.1f} s ({rate:,.0f} chunks/s)")
    stamp = {"size": size, "data": data_stamp(data), "chunks": chunks, "ingest_seconds": seconds}
    (folder / "built.json").write_text(json.dumps(stamp), encoding="utf-8")


def prepare(size: int, out: Path, data: Path, rebuild: bool) -> tuple[Path, list[str], int, Child]:
    """The index folder for `size`, the ask command on it, its chunk count and the untimed ask
    that checked it."""
    folder = out / label(size)
    stamp = folder / "built.json"
    if rebuild or not is_current(stamp, size, data):
        build(size, folder, data)
    question = (folder / "question.txt").read_text(encoding="utf-8")
    ask = [str(BIN / "crag"), "ask", question, "--index", "index", "-q"]
    probe = launch(ask, folder)
    if probe.code == 2 and "ingest" in probe.stderr:  # the on-disk format moved on: build it again
        say(f"{label(size)}: crag ask rejected the index ({probe.stderr.strip()}); rebuilding")
        build(size, folder, data)
        probe = launch(ask, folder)
    if probe.code:
        raise SystemExit(f"crag ask failed at {label(size)} (exit {probe.code}): "
                         f"{probe.stderr.strip()}")
    verdict = re.search(r"^verdict: (\S+)", probe.stdout, re.MULTILINE)
    verdict = verdict.group(1) if verdict else "?"
    say(f"{label(size)}: index ready; {question!r} -> verdict {verdict}")
    return folder, ask, json.loads(stamp.read_text(encoding="utf-8"))["chunks"], probe


def install_size() -> tuple[float, list[tuple[str, float]]]:
    """MB of site-packages after `pip install` of this checkout in a new venv, and per package."""
    with tempfile.TemporaryDirectory(prefix="crag-install-") as tmp:
        source, venv = Path(tmp) / "crag", Path(tmp) / "venv"
        source.mkdir()  # a copy, so the build writes nothing into the checkout
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(PROJECT / name, source)
        shutil.copytree(PROJECT / "src", source / "src",
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = venv / "bin" / "python"
        start = time.perf_counter()
        pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                              "--quiet", "--disable-pip-version-check", str(source)],
                             capture_output=True, text=True, check=False)
        if pip.returncode:
            raise SystemExit(f"pip install failed: {pip.stderr.strip()[-3000:]}")
        say(f"install: pip install took {time.perf_counter() - start:.0f} s")
        site = next(venv.glob("lib/python*/site-packages"))
        total = sum(p.stat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink())
        listed = subprocess.run([str(python), "-I", "-c", _DISTRIBUTIONS], capture_output=True,
                                text=True, check=True).stdout
    return total / MB, [(name, size / MB) for name, size in json.loads(listed)]


def row(name: str, runs: list[Child]) -> str:
    seconds = [r.seconds for r in runs]
    return (f"| {name} | {statistics.median(seconds):.3f} | {min(seconds):.3f} "
            f"| {max(seconds):.3f} | {max(r.peak_mb for r in runs):.1f} |")


def main() -> int:
    cli = _harness.parser(__doc__)
    cli.add_argument("--sizes", default="1000,10000,100000", help="chunks per index, comma-separated")
    cli.add_argument("--runs", type=int, default=3, help="timed runs per command (median reported)")
    cli.add_argument("--rebuild", action="store_true", help="build every index again")
    cli.add_argument("--skip-install", action="store_true", help="skip measuring a fresh install")
    cli.add_argument("--data", type=Path, default=_harness.DATA)
    cli.add_argument("--out", type=Path, default=HERE / "out" / "cold_start",
                     help="where the corpora and indexes are kept, one folder per size")
    args = _harness.parse(cli, smoke={"sizes": "200", "runs": 0, "skip_install": True, "out": None})
    with _harness.measured(__file__, args) as run, tempfile.TemporaryDirectory(prefix="crag-cold-") as tmp:
        measure(args, run, args.out or Path(tmp))
    return 0


def measure(args, run: _harness.Run, out: Path) -> None:  # noqa: ANN001
    sizes = [int(s) for s in args.sizes.split(",")]
    out.mkdir(parents=True, exist_ok=True)
    indexes = [(size, *prepare(size, out, args.data, args.rebuild)) for size in sizes]

    results = {"help": repeat([str(BIN / "crag"), "--help"], args.runs, out),
               "import": repeat([sys.executable, "-c", "import crag"], args.runs, out)}
    for size, folder, ask, _, probe in indexes:
        # prepare's probe warmed it; at smoke size (--runs 0) the probe is the one run
        results[size] = repeat(ask, args.runs, folder, warm=False) if args.runs else [probe]
        say(f"{label(size)}: timed")
    if args.skip_install:
        install = None
        run.skip("the fresh install's size", "--skip-install (it needs pip and the network)")
    else:
        install = install_size()

    print("| command | median s | min s | max s | peak MB |")
    print("|---|---:|---:|---:|---:|")
    print(row("crag --help", results["help"]))
    print(row('python -c "import crag"', results["import"]))
    for size, _, _, chunks, _ in indexes:
        print(row(f"crag ask, {chunks:,} chunks", results[size]))

    def median(key: object) -> float:
        return statistics.median(r.seconds for r in results[key]) if key in results else math.nan

    peak_100k = max(r.peak_mb for r in results[100_000]) if 100_000 in results else math.nan
    run.figures = {"help_seconds": median("help"), "import_seconds": median("import"),
                   "cold_ask_seconds": {chunks: median(size) for size, _, _, chunks, _ in indexes},
                   "peak_mb": {chunks: max(r.peak_mb for r in results[size]) for size, _, _, chunks, _ in indexes},
                   "install_mb": install[0] if install else None}
    if install:
        print("largest distributions: " + ", ".join(f"{n} {mb:.1f}" for n, mb in install[1][:10]))
    run.goal("crag --help, s", median("help"), at_most=0.3)
    run.goal("cold ask at 100k over cold ask at 1k", median(100_000) / median(1000), at_most=1.5)
    run.goal("cold ask at 100k, s", median(100_000), at_most=3)
    run.goal("peak RSS of the cold ask at 100k, MB", peak_100k, at_most=400)
    run.goal("a fresh install's site-packages, MB", install[0] if install else None, at_most=400)

if __name__ == "__main__":
    sys.exit(main())
