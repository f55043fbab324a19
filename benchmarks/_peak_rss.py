"""Peak resident memory of a Python snippet run in a child, for the document benchmarks."""

from __future__ import annotations

import subprocess
import sys

MB = 2**20

# Runs argv[1:] as its only child and prints its exit status and peak RSS in KiB: a child of
# the benchmark itself would inherit the benchmark's peak at exec.
_LAUNCHER = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""
INGEST = "import sys; from crag.app.cli import main; sys.exit(main(['ingest', *sys.argv[1:], '-q']))"
"""`crag ingest ARGS -q`, as code for `peak_rss_mb`."""


def peak_rss_mb(code: str, *args: str, ok: tuple[int, ...] = (0,)) -> float:
    """The peak RSS, in MB (2**20 bytes), of `python -c code args` run by a small launcher; an
    error when it exits with a status not in `ok`."""
    done = subprocess.run([sys.executable, "-c", _LAUNCHER, sys.executable, "-c", code, *args],
                          capture_output=True, text=True, check=True)
    status, kib = done.stdout.split()[-2:]
    if int(status) not in ok:
        raise RuntimeError(f"python -c {code!r} {' '.join(args)} exited with status {status}")
    return int(kib) * 1024 / MB
