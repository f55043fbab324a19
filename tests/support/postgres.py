"""A throwaway PostgreSQL cluster of one test's own (`.ci/postgres`), to stop, restart, freeze
and thaw while a server uses it; the `private_postgres` fixture (conftest.py) makes one."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.paths import REPO

CI_POSTGRES = REPO / ".ci" / "postgres"


def postgres_bin() -> Path | None:
    """Where `.ci/postgres` finds PostgreSQL's programs (PG_BIN, or the newest installed)."""
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    return found[-1] if found else None


class PostgresCluster:
    """A throwaway PostgreSQL cluster of one test's own (`.ci/postgres`), to stop, restart,
    freeze and thaw while a server uses it, without touching the shared one."""

    def __init__(self, folder: Path, bin_dir: Path) -> None:
        self.folder, self.bin = folder, bin_dir
        started = subprocess.run([str(CI_POSTGRES), "start", str(folder)], capture_output=True, check=False, text=True)
        if started.returncode != 0:
            raise RuntimeError(f"PostgreSQL did not start: {started.stderr}")
        self.url = started.stdout.strip()
        self.port = self.url.rsplit(":", 1)[1].split("/")[0]

    def _pg_ctl(self, *args: str) -> None:
        # As root, PostgreSQL runs as `postgres` (see .ci/postgres).
        owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*owner, str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), *args],
                       check=True, capture_output=True)

    def stop(self) -> None:
        """Stop it at once, as a crash or a lost host would: every connection is cut."""
        self._pg_ctl("-m", "immediate", "-w", "stop")

    def start(self) -> None:
        """Start it again on the same port, with the options `.ci/postgres` gave it."""
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                   f"-c unix_socket_directories={self.folder} -c fsync=off")
        self._pg_ctl("-l", str(self.folder / "server.log"), "-w", "-t", "60", "-o", options, "start")

    def freeze(self) -> None:
        """SIGSTOP the postmaster, then its children (backends, helpers): connections stay
        open and nothing answers, as on a hung host. The postmaster first, so that it forks
        no backend the second step would miss."""
        postmaster = self._postmaster()
        os.kill(postmaster, signal.SIGSTOP)
        self._signal(self._children(postmaster), signal.SIGSTOP)

    def thaw(self) -> None:
        postmaster = self._postmaster()
        self._signal(self._children(postmaster), signal.SIGCONT)
        os.kill(postmaster, signal.SIGCONT)

    def _postmaster(self) -> int:
        return int((self.folder / "data" / "postmaster.pid").read_text().split()[0])

    @staticmethod
    def _children(parent: int) -> list[int]:
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()  # after the name, which may hold spaces
            except OSError:
                continue  # it ended meanwhile
            if int(fields[1]) == parent:
                children.append(int(stat.parent.name))
        return children

    @staticmethod
    def _signal(pids: list[int], signum: int) -> None:
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def remove(self) -> None:
        if (self.folder / "data" / "postmaster.pid").exists():
            self.thaw()  # a frozen cluster cannot stop
        subprocess.run([str(CI_POSTGRES), "stop", str(self.folder)], capture_output=True, check=False)
        shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def postgres_url() -> Iterator[str]:
    """CI's PostgreSQL (CRAG_TEST_POSTGRES_URL), else a throwaway cluster of this machine's
    PostgreSQL, removed on exit; the test is skipped where PostgreSQL is not installed."""
    if os.environ.get("CRAG_TEST_POSTGRES_URL"):
        yield os.environ["CRAG_TEST_POSTGRES_URL"]
        return
    bin_dir = postgres_bin()
    if bin_dir is None or not (bin_dir / "initdb").exists():
        pytest.skip("PostgreSQL is not installed (no initdb under /usr/lib/postgresql/*/bin or PG_BIN)")
    cluster = PostgresCluster(Path(tempfile.mkdtemp(prefix="crag-pg-")), bin_dir)
    try:
        yield cluster.url
    finally:
        cluster.remove()
