"""What every benchmark shares: a smoke size, timing, peak memory, a goals line and a JSON line.

    import _harness

    cli = _harness.parser(__doc__)
    cli.add_argument("--sizes", default="1000,10000,100000")
    args = _harness.parse(cli, smoke={"sizes": "200"})
    with _harness.measured(__file__, args) as run:
        ...                                   # the benchmark's own work and tables
        run.figures["p95_ms"] = p95
        run.goal("vector p95 at 100k, ms", p95, at_most=50)
        run.skip("SimpleVectorStore", "--skip-simple")

Leaving the block prints the two lines that close every benchmark's output: `goals: ...`
(each goal's figure, target and whether it was met) and one JSON line,

    {"benchmark": "scale", "smoke": false, "seconds": 721.4, "cpu_seconds": 690.2,
     "peak_rss_mb": 312.0, "figures": {...}, "goals": [{"name", "figure", "target", "met"}],
     "skipped": ["SimpleVectorStore: --skip-simple"]}

`--smoke` runs a benchmark at a tiny size in seconds: it shows the benchmark still runs and
measures nothing. tests/benchmarks/test_smoke.py runs every benchmark so, which is why none can
rot unnoticed. A benchmark with `--data` (the shared dev sets) reads a few questions of each
set at smoke size, over a corpus of their passages and a few others.

`seconds` and `cpu_seconds` cover the block (CPU: this process and the children it waited for);
`peak_rss_mb` is this process's, a child's being the benchmark's own figure (`launch`,
`peak_rss_mb`). A missed goal is a finding, not a failure: the exit status says whether the
benchmark ran. MB is 2**20 bytes throughout.

Also here, because two benchmarks or more need them: offline children (`offline_env`, `launch`),
`percentile`, `read_jsonl`, `spread`.
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model crag loads is inside the install

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = REPO.parent / "shared" / "data"
"""The project's shared dev sets (`squad-dev.jsonl`, `squad-dev-corpus.jsonl`, ...)."""
TESTS = REPO / "tests"
"""On `sys.path`, it lends the benchmarks the tests' fakes: `support.loopback`'s model servers."""
MB = 2**20
SMOKE_QUESTIONS = 5  # per set, at smoke size
SMOKE_DISTRACTORS = 25  # passages per set beside the questions' own


# ---------------------------------------------------------------------------- arguments


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser described by the docstring's first line, with `--smoke`."""
    out = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    out.add_argument("--smoke", action="store_true", help="a tiny size, in seconds, as the test "
                     "suite runs it: shows that the benchmark runs, and measures nothing")
    return out


def parse(cli: argparse.ArgumentParser, smoke: Mapping[str, Any],
          argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The arguments; with `--smoke`, `smoke` gives the defaults (an option given still wins),
    and `--data`, unless given, is a few questions of each shared set."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--smoke" in argv:
        cli.set_defaults(**smoke)
    args = cli.parse_args(argv)
    if args.smoke and "data" in vars(args) and "--data" not in argv:
        args.data = smoke_data(Path(args.data))
    return args


def smoke_data(data: Path) -> Path:
    """A copy of the shared sets cut to `SMOKE_QUESTIONS` questions each, their corpus to those
    questions' passages and `SMOKE_DISTRACTORS` others; removed when the process exits."""
    out = Path(tempfile.mkdtemp(prefix="crag-smoke-data-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    for questions in sorted(data.glob("*-dev.jsonl")):
        kept = questions.read_text(encoding="utf-8").splitlines()[:SMOKE_QUESTIONS]
        wanted = set()
        for line in kept:
            row = json.loads(line)
            wanted.update([row["doc_id"], *row.get("support_doc_ids", [])])
        corpus = data / f"{questions.stem}-corpus.jsonl"
        passages = corpus.read_text(encoding="utf-8").splitlines()
        own = [line for line in passages if json.loads(line)["doc_id"] in wanted]
        others = [line for line in passages if json.loads(line)["doc_id"] not in wanted]
        _write_lines(out / questions.name, kept)
        _write_lines(out / corpus.name, own + others[:SMOKE_DISTRACTORS])
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every record of a .jsonl file (a dev set, a corpus)."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def spread(rows: Sequence[Any], n: int) -> list[Any]:
    """`n` rows spread evenly over `rows` (deterministic): questions from all of a dev set."""
    step = max(len(rows) // max(n, 1), 1)
    return [rows[i * step] for i in range(min(n, len(rows)))]


def _write_lines(path: Path, lines: Sequence[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


# ---------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Goal:
    """A figure against its target: `met` is None when this run did not measure it."""

    name: str
    figure: float | None
    target: str
    met: bool | None

    def __str__(self) -> str:
        if self.figure is None:
            return f"{self.name} {self.target}: not measured"
        met = "met" if self.met else "NOT met"
        return f"{self.name} {self.target}: {met} ({_number(self.figure)})"


@dataclass
class Run:
    """What a benchmark reports beside its own tables: figures, goals and what it skipped."""

    benchmark: str
    smoke: bool
    figures: dict[str, Any] = field(default_factory=dict)
    goals: list[Goal] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def goal(self, name: str, figure: float | None, *, at_most: float | None = None,
             at_least: float | None = None) -> None:
        """A goal: `figure` <= `at_most`, or >= `at_least`; None (or NaN) when not measured."""
        if figure is not None and math.isnan(figure):  # the run did not reach that size
            figure = None
        if at_most is not None:
            target, met = f"<= {at_most:g}", None if figure is None else figure <= at_most
        elif at_least is not None:
            target, met = f">= {at_least:g}", None if figure is None else figure >= at_least
        else:
            raise ValueError("a goal needs at_most or at_least")
        self.goals.append(Goal(name, figure, target, met))

    def skip(self, what: str, why: str) -> None:
        """Say that `what` was not run, and why, in a line now and in the JSON line."""
        self.skipped.append(f"{what}: {why}")
        print(f"skipped: {what}: {why}", file=sys.stderr, flush=True)


@contextmanager
def measured(script: str, args: argparse.Namespace) -> Iterator[Run]:
    """Time the block and, when it ends without an error, print the goals line and the JSON line."""
    run = Run(Path(script).stem, bool(getattr(args, "smoke", False)))
    started, cpu = time.perf_counter(), cpu_seconds()
    yield run
    sys.stdout.flush()
    size = " (smoke size: these are no measurements)" if run.smoke else ""
    print(f"goals{size}: " + ("; ".join(map(str, run.goals)) or "none set"))
    line = {"benchmark": run.benchmark, "smoke": run.smoke,
            "seconds": round(time.perf_counter() - started, 3),
            "cpu_seconds": round(cpu_seconds() - cpu, 3),
            "peak_rss_mb": round(peak_rss_self_mb(), 1), "figures": run.figures,
            "goals": [asdict(g) for g in run.goals], "skipped": run.skipped}
    print(json.dumps(_tidy(line), default=str), flush=True)


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _tidy(value: Any) -> Any:
    """Floats to four significant digits, all the JSON line needs, in nested lists and dicts."""
    if isinstance(value, float):
        return None if math.isnan(value) else float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _tidy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tidy(v) for v in value]
    return value


def cpu_seconds() -> float:
    """CPU seconds of this process, its threads, and the children it has waited for."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def peak_rss_self_mb() -> float:
    """This process's peak RSS so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank `q` quantile (0 <= q <= 1); 0.0 of nothing."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


# ---------------------------------------------------------------------------- children


def offline_env() -> dict[str, str]:
    """This environment, offline, without crag settings or keys that would change a child's run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRAG_", "OPENAI_", "TAVILY_"))}
    env["HF_HUB_OFFLINE"] = "1"
    return env


# Spawns argv[2:], waits for that one child and writes "seconds maxrss_kib exit_code" to argv[1].
# Linux folds the spawning process's peak RSS into the child's ru_maxrss at exec, so a child of
# the benchmark itself would report the benchmark's peak: this launcher (-I -S, about 8.5 MB,
# under a bare `python -c pass`) spawns it instead.
_LAUNCHER = """
import os, sys, time
start = time.perf_counter()
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - start
with open(sys.argv[1], "w") as f:
    f.write(f"{seconds} {usage.ru_maxrss} {os.waitstatus_to_exitcode(status)}")
"""


@dataclass
class Child:
    """One child process's wall seconds, peak RSS, exit status and output."""

    seconds: float
    peak_mb: float
    code: int
    stdout: str
    stderr: str


def launch(argv: Sequence[str], cwd: Path | None = None) -> Child:
    """Run `argv` (an executable's path first) offline (`offline_env`) in a fresh process."""
    with tempfile.NamedTemporaryFile("r", prefix="crag-launch-", suffix=".txt") as report:
        launcher = [sys.executable, "-I", "-S", "-c", _LAUNCHER, report.name, *argv]
        done = subprocess.run(launcher, cwd=cwd, env=offline_env(), capture_output=True, text=True,
                              check=False)
        if done.returncode:
            raise SystemExit(f"launcher failed on {argv}: {done.stderr.strip()}")
        seconds, kib, code = report.read().split()
    return Child(float(seconds), int(kib) / 1024, int(code), done.stdout, done.stderr)


INGEST = ("import sys; from crag.app.cli import main; "
          "sys.exit(main(['ingest', *sys.argv[1:], '-q']))")
"""`crag ingest ARGS -q`, as code for `peak_rss_mb`."""


def peak_rss_mb(code: str, *args: str, ok: tuple[int, ...] = (0,)) -> float:
    """The peak RSS, in MB, of `python -c code args` in a fresh process; an error when it exits
    with a status not in `ok`."""
    child = launch([sys.executable, "-c", code, *args])
    if child.code not in ok:
        raise RuntimeError(f"python -c {code!r} {' '.join(args)} exited with status {child.code}: "
                           f"{child.stderr.strip()[-2000:]}")
    return child.peak_mb
