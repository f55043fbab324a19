"""Every benchmark runs at its smoke size (`--smoke`), so a benchmark that no longer runs is a red
test rather than a surprise the day someone measures.

The benchmarks are found by listing benchmarks/: every script there is one, but the helpers,
whose names start with `_` (`_real_set.py`, the real-world set's checks, among them);
`real_documents/` is data. A new benchmark
is covered by being put there. Each runs as a user runs it, in its own process
(`sys.executable`, offline), a few at once: most of a smoke run is imports and waiting on
loopback servers. Each must exit 0 and end with its JSON line (`benchmarks/_harness.py`).

What CI lacks, a benchmark leaves out itself, runs the rest, and names in its JSON line's
`skipped`; none is skipped whole:
- vs_pack.py, throughput.py: the LlamaIndex CRAG pack, whose own venv pip fills from the
  network. crag's side runs.
- real_model.py: a real model behind llama.cpp's server. A loopback stand-in answers.
- cold_start.py: the size of a fresh install (pip and the network). The cold commands run.
- documents.py: the PDF fixtures, where Chromium is missing (CI installs it).
- ocr.py: the engines not installed; the test extra has tesserocr, which runs.
- load.py: `--http`, a minute a level; throughput.py's smoke starts `crag serve`.
Figures at smoke size measure nothing, so no figure is asserted on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from support.paths import BENCHMARKS, SHARED_DATA

AT_ONCE = 8  # runs mostly import and wait on servers; more would only add memory (~350 MB each)
HANGS_AFTER = 600  # seconds: a guard against a hang, never a measure of speed
# Offline; and one BLAS thread a process: the runs share the cores, and BLAS threads that spin
# while they wait for work only take the CPU from the other runs.
SMOKE_ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}

pytestmark = [
    pytest.mark.slow,  # whole processes on the shared data: about a minute in all on two cores
    pytest.mark.skipif(not (SHARED_DATA / "squad-dev.jsonl").exists(),
                       reason="shared data not checked out beside the repo"),
]


def benchmarks() -> list[str]:
    names = (p.name for p in BENCHMARKS.glob("*.py"))
    return sorted(name for name in names if not name.startswith("_"))


def smoke(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python benchmarks/SCRIPT --smoke`, offline; its whole process group killed if it hangs
    (a benchmark's servers included)."""
    argv = [sys.executable, str(BENCHMARKS / script), "--smoke"]
    child = subprocess.Popen(argv, cwd=cwd, env={**os.environ, **SMOKE_ENV}, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = child.communicate(timeout=HANGS_AFTER)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        err += f"\n(still running after {HANGS_AFTER} s: it hangs; killed)"
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


@pytest.fixture(scope="module")
def smoke_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future]]:
    """The smoke runs of the benchmarks this session selected, `AT_ONCE` at a time, each in a
    folder of its own (nothing lands in the checkout)."""
    selected = [item.callspec.params["script"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")]
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        yield {name: pool.submit(smoke, name, tmp_path_factory.mktemp(name)) for name in selected}


def test_the_benchmarks_are_every_script_in_the_folder_but_its_helpers() -> None:
    found = benchmarks()

    assert "scale.py" in found and "retrieval.py" in found
    assert not [name for name in found if name.startswith("_")]


@pytest.mark.parametrize("script", benchmarks(), ids=lambda script: script.removesuffix(".py"))
def test_every_benchmark_runs_at_smoke_size_and_ends_with_its_json_line(
    script: str, smoke_runs: dict[str, Future]
) -> None:
    done = smoke_runs[script].result()
    said = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"

    assert done.returncode == 0, said
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["benchmark"] == script.removesuffix(".py") and result["smoke"] is True, said
    assert {"seconds", "peak_rss_mb", "figures", "goals", "skipped"} <= result.keys()
