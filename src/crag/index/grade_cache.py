"""Grades a model gave, kept beside the index: the same question about the same chunk costs no
second call.

A grade is keyed by everything that could change it: the grader's kind, the model, the prompt's
version, the question (normalised: case and spacing do not matter) and the chunk's text (its
hash, so a re-ingested chunk with new text never gets an old grade). The cache is one SQLite file
in WAL mode, shared safely by several processes; it keeps at most `max_entries` grades and drops
the least recently used first. (`crag serve` on PostgreSQL keeps them there instead:
grade_cache_postgres.py.)

A cache is a convenience, never a reason for a question to fail: a corrupt file is set aside
(renamed, with one warning) and a fresh one started; a cache that cannot be opened or written at
all is switched off for the process, with one warning; a row whose score is not a grade (text,
a blob, infinity, 5.0: written by hand or by another program) is a miss, and the fresh grade
replaces it.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

log = logging.getLogger(__name__)

FILE_NAME = "grades.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS grades (
    key TEXT PRIMARY KEY,
    score REAL NOT NULL,
    used REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS grades_used ON grades (used);
"""
# How many grades there are, kept by triggers: COUNT(*) reads every row (about 1 ms at 100k),
# and the bound is checked on every write. A file written before the counter is counted once.
# In one write transaction, so that two processes opening the file do not both count it.
_COUNTER = """
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS grades_count (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL);
INSERT INTO grades_count (id, n)
    SELECT 1, (SELECT COUNT(*) FROM grades) WHERE NOT EXISTS (SELECT 1 FROM grades_count);
CREATE TRIGGER IF NOT EXISTS grades_added AFTER INSERT ON grades
    BEGIN UPDATE grades_count SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS grades_removed AFTER DELETE ON grades
    BEGIN UPDATE grades_count SET n = n - 1; END;
COMMIT;
"""


def normalise_question(question: str) -> str:
    """The question as the cache sees it: case-folded, spacing collapsed, end punctuation dropped."""
    return re.sub(r"\s+", " ", question).strip().rstrip("?!. ").casefold()


def grade_key(*, grader: str, model: str, prompt_version: str, question: str, content: str, scope: str = "") -> str:
    """The cache key of one grade: a hash over everything that could change the grade, and in a
    cache several indexes share, whose chunk it is (`scope`: `grade_scope`)."""
    parts = (grader, model, prompt_version, normalise_question(question), content) + ((scope,) if scope else ())
    digest = hashlib.sha256()
    for part in parts:
        encoded = part.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "big"))  # length-prefixed: no two tuples collide
        digest.update(encoded)
    return digest.hexdigest()


def grade_scope(cache: GradeCache | AsyncGradeCache, index_path: Path | None) -> str:
    """What keys the grades in `cache` to the index at `index_path`: nothing for the index's own
    grades.sqlite (in its folder, its keys as they always were); else the index folder, so that
    in a cache several indexes share (PostgreSQL's, one per server) a grade of one collection's
    chunk is never found through another collection, which would tell it that chunk's text."""
    if index_path is None or (isinstance(cache, GradeCache) and cache.path.parent == index_path):
        return ""
    return str(index_path.resolve())


def usable_score(value: object) -> float | None:
    """A cached score, or None where the row holds no grade: anything but a finite number in
    [0, 1] (SQLite keeps whatever a column is given; a hand-edited row may say anything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    score = float(value)
    return score if math.isfinite(score) and 0.0 <= score <= 1.0 else None


@dataclass(frozen=True)
class CacheStats:
    """What `crag cache stats` prints."""

    path: Path | str  # the file, or the database and table
    entries: int
    max_entries: int
    bytes: int
    enabled: bool


@runtime_checkable
class AsyncGradeCache(Protocol):
    """A grade cache with async methods (PostgreSQL's, grade_cache_postgres.py): awaited on the
    event loop, where `GradeCache`'s synchronous ones are sent to a thread."""

    async def aget_many(self, keys: Sequence[str]) -> dict[str, float]: ...

    async def aput_many(self, scores: Mapping[str, float]) -> None: ...


class GradeCache:
    """A bounded, persistent map from `grade_key` to a score in [0, 1].

    Methods are synchronous and quick (one indexed SQLite statement each); call them off the
    event loop (`crag._offload.off_loop`).
    """

    def __init__(self, path: Path, *, max_entries: int = 100_000, timeout: float = 5.0) -> None:
        if max_entries <= 0:
            raise ValueError(f"max_entries must be positive, not {max_entries}")
        self.path = Path(path)
        self.max_entries = max_entries
        self.timeout = timeout
        self.enabled = True
        self._local = threading.local()  # one connection per thread: sqlite3 objects are not shared
        self._lock = threading.Lock()

    # -- reading and writing ---------------------------------------------------------------

    def get_many(self, keys: Iterable[str]) -> dict[str, float]:
        """The cached scores among `keys` (a miss is absent); hits count as recently used."""
        keys = list(dict.fromkeys(keys))
        if not keys or not self.enabled:
            return {}
        found: dict[str, float] = {}

        def read(db: sqlite3.Connection) -> None:
            for start in range(0, len(keys), 500):  # SQLite's limit on bound parameters
                batch = keys[start : start + 500]
                marks = ",".join("?" * len(batch))
                rows = db.execute(f"SELECT key, score FROM grades WHERE key IN ({marks})", batch)
                scores = ((key, usable_score(score)) for key, score in rows)
                found.update({key: score for key, score in scores if score is not None})
            if found:
                now = time.time()
                db.executemany("UPDATE grades SET used = ? WHERE key = ?", [(now, k) for k in found])

        self._transaction(read)
        return found

    def put_many(self, scores: Mapping[str, float]) -> None:
        """Keep `scores`; past `max_entries`, the least recently used grades go first."""
        if not scores or not self.enabled:
            return
        now = time.time()
        clamped = ((key, usable_score(min(max(float(score), 0.0), 1.0))) for key, score in scores.items())
        rows = [(key, score, now) for key, score in clamped if score is not None]  # NaN: not kept
        if not rows:
            return

        def write(db: sqlite3.Connection) -> None:
            db.executemany(
                "INSERT INTO grades (key, score, used) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET score = excluded.score, used = excluded.used",
                rows,
            )
            (count,) = db.execute("SELECT n FROM grades_count").fetchone()
            if count > self.max_entries:
                db.execute(
                    "DELETE FROM grades WHERE key IN (SELECT key FROM grades ORDER BY used LIMIT ?)",
                    (count - self.max_entries,),
                )

        self._transaction(write, patient=True)

    def clear(self) -> int:
        """Forget every grade; the number forgotten."""
        removed: list[int] = [0]

        def wipe(db: sqlite3.Connection) -> None:
            removed[0] = db.execute("DELETE FROM grades").rowcount

        self._transaction(wipe, patient=True)
        return removed[0]

    def stats(self) -> CacheStats:
        entries: list[int] = [0]

        def count(db: sqlite3.Connection) -> None:
            entries[0] = db.execute("SELECT n FROM grades_count").fetchone()[0]

        if self.enabled:
            self._transaction(count)
        size = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file())
        return CacheStats(self.path, entries[0], self.max_entries, size, self.enabled)

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # -- the file, and what goes wrong with it ----------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")  # readers never wait on a writer in another process
            db.execute("PRAGMA synchronous=NORMAL")  # a lost grade costs one call, not data
            db.executescript(_SCHEMA)
            db.executescript(_COUNTER)
            self._local.db = db
        return db

    def _transaction(self, work, *, patient: bool = False) -> None:  # noqa: ANN001 - a function of one connection
        """Run `work` in one write transaction. Busy past the timeout (another process): a read
        misses at once; a `patient` write tries once more, then is dropped. The cache stays on."""
        for attempt in range(2):
            try:
                db = self._connect()
                db.execute("BEGIN IMMEDIATE")
                with db:  # COMMIT, or ROLLBACK if `work` raises
                    work(db)
                return
            except sqlite3.DatabaseError as exc:  # OperationalError (busy) among them
                self.close()
                if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
                    if patient and attempt == 0:
                        continue
                    log.debug("grade cache %s busy: %s", self.path, exc)
                    return
                if attempt == 0 and _is_corruption(exc) and self._set_aside(exc):
                    continue  # a fresh file: try once more
                self._switch_off(exc)
                return
            except OSError as exc:
                self.close()
                self._switch_off(exc)
                return

    def _set_aside(self, exc: BaseException) -> bool:
        """Move a damaged cache file out of the way; True when a fresh one can be started."""
        with self._lock:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            try:
                if self.path.exists():
                    self.path.replace(aside)
                for extra in ("-wal", "-shm"):
                    Path(str(self.path) + extra).unlink(missing_ok=True)
            except OSError:
                return False
        log.warning("grade cache %s was damaged (%s): set aside as %s; starting a new one",
                    self.path, exc, aside.name)
        return True

    def _switch_off(self, exc: BaseException) -> None:
        if self.enabled:
            self.enabled = False
            log.warning("grade cache %s cannot be used (%s): grading goes on without it",
                        self.path, exc)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """The database was locked by another connection for longer than the timeout."""
    return "locked" in str(exc) or "busy" in str(exc)


def _is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """A damaged file, as opposed to a busy one (another process holding the lock too long:
    `_is_busy`, checked first)."""
    text = str(exc).lower()
    return any(word in text for word in ("malformed", "not a database", "corrupt", "disk image"))
