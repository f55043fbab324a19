"""A running `crag serve` picks up the index version a later `crag ingest` wrote, between runs,
without a restart.

An ingest writes a new version folder and then replaces the index's `CURRENT` pointer file
atomically (a rename: a new inode). Once a second, off the event loop, the server compares
the pointer's inode, size and mtime with what it loaded; when they change it loads the new
version and builds a new workflow on it in a thread, then registers that workflow under the
same name (`WorkflowServer.add_workflow`, public). Runs already started keep the workflow,
and so the index, they started with; the next run gets the new one. A version that cannot be
loaded leaves the old one serving, and `/health` says 503 with the reason until a good one
arrives.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crag.index.store import POINTER

Mark = tuple[int, int, int] | None


def pointer_mark(index_path: Path) -> Mark:
    """What changes when an ingest points CURRENT elsewhere (None: no pointer, format 1)."""
    try:
        st = os.stat(index_path / POINTER)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class IndexReloader:
    """One served collection's index: whether it can serve (`problem_now`, for /health), and,
    given `rebuild` and `install`, its reloads (module docstring). `rebuild()` loads the index
    and returns a workflow on it, ready; `install(built)` serves it (both from `build_server`)."""

    def __init__(self, index_path: Path, rebuild: Callable[[], Any] | None = None,
                 install: Callable[[Any], None] | None = None) -> None:
        self.index_path = index_path
        self.rebuild = rebuild
        self.install = install
        self.seen = pointer_mark(index_path)
        self.reloads = 0
        self.problem: str | None = None  # a failed reload, or an unreadable folder, for /health

    async def check(self) -> bool:
        """Load and install a new version if the pointer moved; whether one was installed."""
        if self.rebuild is None or self.install is None:
            return False
        mark = await asyncio.wait_for(asyncio.to_thread(pointer_mark, self.index_path), 2.0)
        if mark == self.seen:
            return False
        self.seen = mark
        try:
            workflow = await asyncio.to_thread(self.rebuild)
        except Exception as exc:  # noqa: BLE001 - reported by /health; the old version serves on
            self.problem = f"the new index version cannot be loaded: {type(exc).__name__}: {exc}"
            return False
        self.install(workflow)
        self.problem = None
        self.reloads += 1
        return True

    async def run_forever(self, every: float = 1.0) -> None:
        while True:
            try:
                await self.check()
            except Exception as exc:  # noqa: BLE001 - a slow or vanished folder: try again
                self.problem = f"the index folder cannot be read: {type(exc).__name__}"
            await asyncio.sleep(every)

    async def problem_now(self) -> str | None:
        """Why the served index cannot serve: a failed reload, or its files gone from disk."""
        if self.problem:
            return self.problem
        try:
            return await asyncio.wait_for(asyncio.to_thread(self._probe), PROBE_TIMEOUT)
        except asyncio.TimeoutError:
            return f"the index folder did not answer within {PROBE_TIMEOUT:g} s"

    def _probe(self) -> str | None:
        pointer = self.index_path / POINTER
        try:
            version = pointer.read_text(encoding="utf-8").strip() if pointer.exists() else ""
            folder = self.index_path / version if version else self.index_path
            if not (folder / "manifest.json").is_file():
                return f"the index at {self.index_path} has no readable version {version or '(format 1)'}"
        except OSError as exc:
            return f"the index at {self.index_path} cannot be read: {exc.strerror or type(exc).__name__}"
        return None


PROBE_TIMEOUT = 2.0  # seconds for /health's look at the folder
