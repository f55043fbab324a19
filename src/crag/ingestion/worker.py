"""The built-in readers run in a child process, so that one file cannot take the ingest with
it: the child is stopped at `ingest.max_seconds` and held to `ingest.max_memory_mb` (beyond
what it starts with), and the file is skipped with its reason while the ingest goes on.

A hostile PDF (22 KB, a content stream of 1.9 million tokens) took pypdf 190 s; no check
inside a parser bounds every such case, and a thread cannot be stopped, but a process can.
`max_seconds` bounds the whole file, OCR included: OCR begins no page past it and leaves the
file out with a line (`crag.ingestion.formats.ocr`), and the child is stopped `GRACE` seconds
later if a page runs on. Any failure inside a reader, here or in the child, leaves out that
file alone, with a line naming it.

The child is forked where fork is the platform's own default (Linux): it inherits the imported
readers, and starting it costs ~20 ms against ~3 s for a fresh interpreter to import them again;
the sample docs' ingest takes ~0.2 s more CPU than reading in process (4.4 s against 4.2 s, the
medians of 8 pairs; copy-on-write faults after the fork) and no wall time one can measure. Elsewhere
it is spawned. It runs only the readers, so locks that other threads of the host held at the
fork (crag mcp ingests in a thread) are never waited on. One child serves every file of an
ingest and is replaced after one it had to be stopped for. A user's own reader
(`ingest.readers`) runs in the ingest's process: it is trusted code that opens the file itself.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.files import MB, ReadLimits, file_digest, read_checked, seen_by_walk, walked
from crag.ingestion.formats import short_reason
from crag.ingestion.formats.ocr import OcrProgress
from crag.ingestion.readers import Reader, read_documents

GRACE = 1.0
"""Seconds the ingest waits past a file's `max_seconds` before it stops the child: OCR, which
begins no page past the bound, says so itself, naming the pages it read."""


class FileReader:
    """`read(path)`: a file's Documents and the SHA-256 of the bytes they came from, or an
    `IngestError` with the one-line reason it was left out. Use it in a `with` block, which
    stops the child at its end (and on Ctrl-C)."""

    def __init__(self, limits: ReadLimits | None = None, readers: Mapping[str, Reader] | None = None) -> None:
        self.limits = limits or ReadLimits()
        self.readers = dict(readers or {})
        self._child: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None

    def __enter__(self) -> FileReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def read(self, path: Path, ocr_progress: OcrProgress | None = None) -> tuple[list[Document], str]:
        """The file's Documents and the SHA-256 of what they were read from; `IngestError`
        with the reason when the file is left out. `ocr_progress(done, total)` follows the
        pages of the file read by OCR, if any are."""
        if path.suffix.lower() in self.readers:  # a user's reader opens the file itself
            return _in_process(path, self.limits, lambda: (
                list(read_documents(path, b"", self.readers, self.limits, ocr_progress)),
                file_digest(path, self.limits)))
        conn = self._started()
        if conn is None:  # no child to be had: read here, bounded in size and OCR's time, not parsing's
            def here() -> tuple[list[Document], str]:
                data, digest = read_checked(path, self.limits)
                return list(read_documents(path, data, None, self.limits, ocr_progress)), digest

            return _in_process(path, self.limits, here)
        conn.send((str(path), seen_by_walk(path)))
        deadline = time.monotonic() + self.limits.max_seconds + GRACE  # the whole file's, OCR's pages too
        ocr = None
        while True:
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                self.close()
                what = "reading it" if ocr is None else f"reading it (at OCR of scanned page {ocr[0] + 1} of {ocr[1]})"
                raise IngestError(f"{path}: {what} took over {self.limits.max_seconds:g} s "
                                  "(ingest.max_seconds); stopped, and left out.")
            try:
                kind, *reply = conn.recv()
            except (EOFError, OSError):  # the child died: killed for its memory, or crashed
                code = self.close()
                how = f"killed by signal {-code}" if code and code < 0 else f"exit status {code}"
                raise IngestError(f"{path}: its reader stopped ({how}), most likely past "
                                  f"ingest.max_memory_mb ({self.limits.max_memory_mb:g} MB). Left out.") from None
            except Exception as exc:  # noqa: BLE001 - what it sent cannot be taken back: this file only
                self.close()
                raise IngestError(failure(path, exc, self.limits)[1]) from None
            if kind != "ocr":
                break
            ocr = reply
            if ocr_progress is not None:
                ocr_progress(*reply)
        if kind == "ok":
            return reply[0], reply[1]
        if kind == "stop":  # out of memory: the child's heap is not to be trusted for the next file
            self.close()
        raise IngestError(reply[0])

    def close(self) -> int | None:
        """Stop the child, if one runs; its exit status."""
        child, self._child = self._child, None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if child is None or child.pid is None:  # never started
            return None
        child.kill()
        child.join()
        return child.exitcode

    def _started(self) -> Connection | None:
        if self._child is not None and self._child.is_alive() and self._conn is not None:
            return self._conn
        self.close()
        context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        ours, theirs = context.Pipe()
        self._child = context.Process(target=_serve, args=(theirs, ours, self.limits, os.getpid()),
                                      daemon=True, name="crag-reader")
        self._conn = ours
        try:
            self._child.start()
            theirs.close()
            ours.recv()  # ready: a spawned child's imports do not count against the first file's time
        except (AssertionError, OSError, EOFError):  # inside a daemonic process (a Pool's worker): none
            theirs.close()
            self.close()
            return None
        return ours


def _serve(conn: Connection, parents: Connection, limits: ReadLimits, parent: int) -> None:
    """The child: read each path sent, answer ("ok", documents, sha256) or (kind, reason)."""
    parents.close()  # else a forked child holds the parent's end open, and never sees it go
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the ingest's to handle; it stops us
    _die_with(parent)
    _limit_memory(limits.max_memory_mb)
    conn.send("ready")
    while True:
        try:
            name, seen = conn.recv()
        except (EOFError, OSError):
            return
        path = walked(name, seen)
        _limit_time(limits.max_seconds)

        def ocr_progress(done: int, total: int) -> None:
            # CPU time, not the file's bound (OCR keeps that): Tesseract may run several threads.
            _limit_time(limits.max_seconds)
            conn.send(("ocr", done, total))

        try:
            data, digest = read_checked(path, limits)
            reply: tuple = ("ok", list(read_documents(path, data, None, limits, ocr_progress)), digest)
        except BaseException as exc:  # noqa: BLE001 - a parser's own failure skips the file, not the ingest
            reply = failure(path, exc, limits)
        data = None
        try:
            conn.send(reply)  # pickled whole before a byte is written: a failure sends nothing
        except (EOFError, OSError):  # the ingest is gone
            return
        except BaseException as exc:  # noqa: BLE001 - documents that cannot be sent: this file only
            reply = None
            conn.send(failure(path, exc, limits))


def failure(path: Path, exc: BaseException, limits: ReadLimits) -> tuple[str, str]:
    """A reader's failure on `path` as the line that leaves the file out: ("skip", line), or
    ("stop", line) when it ran out of memory (its process is not to be trusted after)."""
    if isinstance(exc, IngestError):
        return "skip", str(exc)
    if isinstance(exc, MemoryError):
        return "stop", (f"{path}: reading it needs more than ingest.max_memory_mb "
                        f"({limits.max_memory_mb:g} MB); left out.")
    if isinstance(exc, RecursionError):
        return "skip", f"{path}: nested too deeply to read; left out."
    if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: not the file's doing
        raise exc
    return "skip", f"{path}: its reader failed ({type(exc).__name__}: {short_reason(exc)}); left out."


Read = Callable[[], tuple[list[Document], str]]


def _in_process(path: Path, limits: ReadLimits, read: Read) -> tuple[list[Document], str]:
    """`read()` in the ingest's own process, its failure that file's line (as in the child)."""
    try:
        return read()
    except BaseException as exc:  # noqa: BLE001 - failure() lets Ctrl-C and exits through
        raise IngestError(failure(path, exc, limits)[1]) from None


def _die_with(parent: int) -> None:
    """Be killed when the ingest's process dies (Linux), even by kill -9: a reader left behind
    would go on reading a hostile file, holding the index's lock, until its CPU limit."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)


def _limit_memory(megabytes: float) -> None:
    """Cap the address space at what the process holds now plus `megabytes` (Linux; elsewhere
    the time limit still holds). Relative, because a forked child starts with its parent's."""
    try:
        import resource

        with open("/proc/self/statm") as statm:
            now = int(statm.read().split()[0]) * resource.getpagesize()
    except (ImportError, OSError):
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = now + int(megabytes * MB)
    resource.setrlimit(resource.RLIMIT_AS, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))


def _limit_time(seconds: float) -> None:
    """Let the system end this file's read a little after the parent would: a child whose
    parent was killed (kill -9) must not read on, holding the index's lock, for ever."""
    try:
        import resource
    except ImportError:
        return
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = spent + int(seconds) + 10
    if hard == resource.RLIM_INFINITY or soft <= hard:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
