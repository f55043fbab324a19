"""The grade cache: keyed by everything that changes a grade, bounded, shared by processes,
and never the reason a question fails."""

from __future__ import annotations

import logging
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from crag.index.grade_cache import GradeCache, grade_key, normalise_question

BASE = dict(grader="llm", model="gpt-4o-mini", prompt_version="grade-v1",
            question="Who founded Lumen?", content="Lumen was founded by Ada.")


@pytest.fixture
def cache(tmp_path: Path) -> GradeCache:
    return GradeCache(tmp_path / "grades.sqlite", max_entries=100)


@pytest.mark.parametrize("field,value", [
    ("grader", "batch"),
    ("model", "gpt-4o"),
    ("prompt_version", "grade-v2"),
    ("question", "Who founded Helio?"),
    ("content", "Lumen was founded by Grace."),  # a re-ingested chunk with new text
])
def test_anything_that_changes_a_grade_changes_its_key(field: str, value: str) -> None:
    assert grade_key(**BASE) != grade_key(**{**BASE, field: value})


def test_the_question_is_keyed_without_case_spacing_or_end_punctuation() -> None:
    assert normalise_question("  who   FOUNDED lumen ? ") == normalise_question("Who founded Lumen")
    assert grade_key(**BASE) == grade_key(**{**BASE, "question": "who founded  LUMEN"})


def test_a_kept_grade_is_found_again_and_a_miss_is_absent(cache: GradeCache) -> None:
    hit, miss = grade_key(**BASE), grade_key(**{**BASE, "model": "other"})
    cache.put_many({hit: 0.8})
    assert cache.get_many([hit, miss]) == {hit: 0.8}


def test_a_new_process_reads_what_another_kept(tmp_path: Path) -> None:
    key = grade_key(**BASE)
    GradeCache(tmp_path / "g.sqlite").put_many({key: 0.25})
    assert GradeCache(tmp_path / "g.sqlite").get_many([key]) == {key: 0.25}


def test_the_least_recently_used_grades_go_first_past_the_bound(tmp_path: Path) -> None:
    cache = GradeCache(tmp_path / "g.sqlite", max_entries=3)
    keys = [grade_key(**{**BASE, "content": f"chunk {i}"}) for i in range(4)]
    cache.put_many({keys[0]: 0.1})
    cache.put_many({keys[1]: 0.2})
    cache.put_many({keys[2]: 0.3})
    cache.get_many([keys[0]])  # used again: now the newest
    cache.put_many({keys[3]: 0.4})
    assert set(cache.get_many(keys)) == {keys[0], keys[2], keys[3]}
    assert cache.stats().entries == 3


def _rows(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM grades").fetchone()[0]


def test_the_count_the_bound_is_checked_against_stays_exact(tmp_path: Path) -> None:
    """The bound reads a counter kept by triggers (not COUNT(*) on every write): through new
    grades, grades written again, trimming and clearing, it says what the table holds."""
    cache = GradeCache(tmp_path / "g.sqlite", max_entries=5)
    keys = [grade_key(**{**BASE, "content": f"chunk {i}"}) for i in range(8)]
    cache.put_many({k: 0.5 for k in keys[:3]})
    cache.put_many({k: 0.7 for k in keys[:4]})  # three written again, one new
    assert cache.stats().entries == _rows(cache.path) == 4
    cache.put_many({k: 0.2 for k in keys[4:]})  # past the bound: trimmed to it
    assert cache.stats().entries == _rows(cache.path) == 5
    cache.clear()
    assert cache.stats().entries == _rows(cache.path) == 0


def test_a_cache_written_before_the_counter_is_counted_once_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "g.sqlite"
    with sqlite3.connect(path) as db:  # the schema as it was, with two grades in it
        db.execute("CREATE TABLE grades (key TEXT PRIMARY KEY, score REAL NOT NULL, used REAL NOT NULL) WITHOUT ROWID")
        db.executemany("INSERT INTO grades VALUES (?, 0.5, 1.0)", [("a",), ("b",)])
    cache = GradeCache(path, max_entries=100)
    assert cache.stats().entries == 2
    cache.put_many({grade_key(**BASE): 0.9})
    assert cache.stats().entries == _rows(path) == 3


def test_clear_forgets_every_grade(cache: GradeCache) -> None:
    cache.put_many({grade_key(**BASE): 0.5})
    assert cache.clear() == 1
    assert cache.stats().entries == 0


def _writer(path: str, worker: int, count: int) -> None:
    cache = GradeCache(Path(path), max_entries=10_000)
    for i in range(count):
        cache.put_many({grade_key(**{**BASE, "content": f"w{worker} c{i}"}): i / count})
        cache.get_many([grade_key(**{**BASE, "content": f"w{1 - worker} c{i}"})])
    assert cache.enabled, "a busy cache was switched off"


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path, count = tmp_path / "g.sqlite", 150
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_writer, args=(str(path), w, count)) for w in (0, 1)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(timeout=120)
        assert p.exitcode == 0
    cache = GradeCache(path, max_entries=10_000)
    keys = [grade_key(**{**BASE, "content": f"w{w} c{i}"}) for w in (0, 1) for i in range(count)]
    assert len(cache.get_many(keys)) == 2 * count


def test_a_corrupt_file_is_set_aside_with_one_warning_and_grading_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "grades.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    cache = GradeCache(path)
    key = grade_key(**BASE)
    with caplog.at_level(logging.WARNING, logger="crag.index.grade_cache"):
        assert cache.get_many([key]) == {}
        cache.put_many({key: 0.9})
    assert cache.get_many([key]) == {key: 0.9}
    assert [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()] != []
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert list(tmp_path.glob("grades.sqlite.corrupt-*")), "the damaged file was not kept aside"


def test_a_cache_that_cannot_be_opened_is_switched_off_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache's folder should be")
    cache = GradeCache(blocker / "grades.sqlite")
    with caplog.at_level(logging.WARNING, logger="crag.index.grade_cache"):
        cache.put_many({grade_key(**BASE): 0.5})
        assert cache.get_many([grade_key(**BASE)]) == {}
    assert not cache.enabled
    assert "grading goes on without it" in caplog.text


def test_a_cache_busy_past_its_timeout_misses_and_stays_on(tmp_path: Path) -> None:
    path = tmp_path / "g.sqlite"
    GradeCache(path).put_many({"k": 0.5})
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process's long write
    try:
        busy = GradeCache(path, timeout=0.05)
        assert busy.get_many(["k"]) == {}
        assert busy.enabled, "a busy cache is not a broken one"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert busy.get_many(["k"]) == {"k": 0.5}


# Rows another program (or a hand) may have written where a grade belongs.
DAMAGED = [5.0, -3, float("inf"), float("-inf"), 1e309, "abc", "0.5 maybe", "", b"\x00\xffblob", b"0.5"]


class Counting:
    """Grades every chunk 0.75 and counts the chunks it was asked about."""

    name = "counting"

    def __init__(self) -> None:
        self.asked = 0

    async def grade(self, query: str, chunks: list) -> list:
        from crag.events import Grade

        self.asked += len(chunks)
        return [Grade(chunk_id=c.node.node_id, score=0.75, grader=self.name) for c in chunks]


async def test_a_row_that_holds_no_grade_is_a_miss_and_is_replaced(tmp_path: Path) -> None:
    from llama_index.core.schema import NodeWithScore, TextNode

    from crag.steps.grading import CachedGrader

    path = tmp_path / "grades.sqlite"
    chunks = [NodeWithScore(node=TextNode(text=f"Lumen fact {i}.", id_=f"c{i}"), score=1.0)
              for i in range(len(DAMAGED))]
    grader = Counting()
    cached = CachedGrader(grader, GradeCache(path), model="m")
    await cached.grade("Who founded Lumen?", chunks)  # every grade kept: now damage every row
    db = sqlite3.connect(path, isolation_level=None)
    keys = [grade_key(grader="counting", model="m", prompt_version=cached.version,
                      question="Who founded Lumen?", content=c.node.get_content()) for c in chunks]
    for key, value in zip(keys, DAMAGED):
        db.execute("UPDATE grades SET score = ? WHERE key = ?", (value, key))
    db.close()

    grades = await cached.grade("Who founded Lumen?", chunks)  # the question goes on
    assert [g.score for g in grades] == [0.75] * len(DAMAGED) and not any(g.cached for g in grades)
    assert grader.asked == 2 * len(DAMAGED)
    assert GradeCache(path).get_many(keys) == dict.fromkeys(keys, 0.75)  # each row replaced


def test_a_grade_that_is_not_a_number_is_not_kept(cache: GradeCache) -> None:
    cache.put_many({"nan": float("nan"), "high": float("inf"), "ok": 0.5})
    assert cache.get_many(["nan", "high", "ok"]) == {"high": 1.0, "ok": 0.5}
    assert cache.enabled
