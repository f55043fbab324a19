"""No data lost: a real `crag ingest` process killed part-way (SIGKILL while it splits and
embeds, while it writes the new index, at a random moment) or interrupted (Ctrl-C) leaves
the previous index loadable with its old content, and a later ingest completes.

Each kill is a fresh process (about 2 s of imports), hence `slow`.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import crag
from crag.index import ChunkIndex

pytestmark = pytest.mark.slow
# Seconds a stage may take before a test gives up: on two cores shared with four CPU burners
# and other work, starting Python and its imports alone took up to a minute.
DEADLINE = 300.0

WORDS = (
    "battery camera drone flight charge minutes video storage warranty defect propeller motor "
    "sensor gimbal remote range signal firmware update landing altitude wind compass antenna"
).split()


@pytest.fixture
def old_index(tmp_path: Path) -> tuple[Path, list[str]]:
    """A small index (the one that must survive) and its chunk ids, in order."""
    root = tmp_path
    (root / "old.md").write_text("# Warranty\nThe Zephyr warranty covers defects for two years.\n")
    crag.ingest([root / "old.md"], root / "index")
    return root / "index", [n.node_id for n in ChunkIndex.load(root / "index").nodes]


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 2 MB of .jsonl: a few seconds of splitting, embedding and writing."""
    rng = random.Random(6)
    path = tmp_path_factory.mktemp("corpus") / "big.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in range(1200):
            text = " ".join(" ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(16))
            f.write(json.dumps({"doc_id": f"doc-{i}", "title": f"Note {i}", "text": text}) + "\n")
    return path


def _as_foreground() -> None:
    """In the child, before `crag` starts: Ctrl-C at its default, as in a terminal's foreground job.

    A command a non-interactive shell starts in the background (`pytest &` beside CPU burners)
    inherits SIGINT ignored, as POSIX asks, and so would every ingest started from it: Python
    then installs no KeyboardInterrupt handler, the test's SIGINT is dropped by the kernel and
    the ingest finishes with 0. A Ctrl-C is typed at a foreground job, whose SIGINT is never
    ignored.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Ingest:
    """`crag ingest CORPUS --index INDEX` in a child process, its stderr lines collected."""

    def __init__(self, corpus: Path, index: Path) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "crag.app.cli", "ingest", str(corpus), "--index", str(index)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_as_foreground,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line)

    def wait_for_line(self, prefix: str, timeout: float = DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        while not any(line.startswith(prefix) for line in self.lines):
            assert self.process.poll() is None, f"ingest ended before printing {prefix!r}: {self.lines}"
            assert time.monotonic() < deadline, f"no {prefix!r} line in {timeout} s"
            time.sleep(0.005)

    def wait_for_new_version(self, index: Path, timeout: float = DEADLINE) -> None:
        """Until a version is being written inside the index folder (`.vN.tmp-…`)."""
        deadline = time.monotonic() + timeout
        while not half_written(index):
            assert self.process.poll() is None, f"ingest ended before writing a version: {self.lines}"
            assert time.monotonic() < deadline, f"no version written in {timeout} s"
            time.sleep(0.001)

    def signal(self, signum: int) -> int:
        self.process.send_signal(signum)
        code = self.process.wait(DEADLINE)
        self._reader.join(5)
        return code


def half_written(index: Path) -> list[Path]:
    return [p for p in index.iterdir() if ".tmp-" in p.name]


def assert_old_index(index: Path, old_ids: list[str]) -> None:
    assert [n.node_id for n in ChunkIndex.load(index).nodes] == old_ids


def test_killing_ingest_while_it_splits_and_embeds_keeps_the_old_index(old_index, big_corpus) -> None:
    index, old_ids = old_index
    run = Ingest(big_corpus, index)
    run.wait_for_line("crag: read")  # the files are read: splitting and embedding are under way
    time.sleep(random.Random(1).uniform(0.0, 0.5))
    assert run.signal(signal.SIGKILL) == -signal.SIGKILL
    assert_old_index(index, old_ids)


def test_killing_ingest_while_it_writes_keeps_the_old_index_and_the_next_ingest_completes(
    old_index, big_corpus
) -> None:
    index, old_ids = old_index
    run = Ingest(big_corpus, index)
    run.wait_for_new_version(index)  # the new version is being written beside the old
    time.sleep(random.Random(2).uniform(0.0, 0.01))
    assert run.signal(signal.SIGKILL) == -signal.SIGKILL
    loaded = [n.node_id for n in ChunkIndex.load(index).nodes]
    # Killed before the switch (nearly always): the old index, and the new one half-written
    # beside it. Killed after it: the whole new one.
    assert (loaded == old_ids and half_written(index)) or (loaded[: len(old_ids)] == old_ids and len(loaded) > 1000)

    again = Ingest(big_corpus, index)
    assert again.process.wait(DEADLINE) == 0, again.lines
    complete = ChunkIndex.load(index)
    assert [n.node_id for n in complete.nodes][: len(old_ids)] == old_ids
    assert {n.metadata["doc_id"] for n in complete.nodes} >= {"doc-0", "doc-1199"}
    assert not half_written(index)  # the next ingest cleared what the killed one left


def test_killing_ingest_at_random_moments_never_leaves_a_broken_index(old_index, big_corpus) -> None:
    index, old_ids = old_index
    rng = random.Random(3)
    for _ in range(2):
        run = Ingest(big_corpus, index)
        run.wait_for_line("crag: read")
        time.sleep(rng.uniform(0.0, 2.0))
        run.signal(signal.SIGKILL)
        loaded = [n.node_id for n in ChunkIndex.load(index).nodes]
        assert loaded == old_ids or (loaded[: len(old_ids)] == old_ids and len(loaded) > 1000)
        if loaded != old_ids:
            break  # the ingest had finished; nothing more to interrupt


def test_ctrl_c_during_ingest_exits_130_and_keeps_the_old_index(old_index, big_corpus) -> None:
    index, old_ids = old_index
    run = Ingest(big_corpus, index)
    run.wait_for_line("crag: read")  # mid-way: splitting and embedding take seconds more
    assert run.signal(signal.SIGINT) == 130, run.lines
    assert run.lines[-1] == "crag: interrupted\n" and not any("Traceback" in line for line in run.lines)
    assert_old_index(index, old_ids)
