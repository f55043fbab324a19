"""The grade cache in PostgreSQL (`crag serve` on a postgresql:// store): shared by processes,
bounded, and never the reason a question fails, down or frozen.

On the shared PostgreSQL of CI (CRAG_TEST_POSTGRES_URL) where it is set, else on a cluster of
this module's own; skipped where PostgreSQL is not installed. Tests that stop or freeze the
database get a cluster of their own (`private_postgres`)."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from llama_index.core.schema import NodeWithScore, TextNode
from support.loopback import LoopbackServer, message_text, openai_chat, uvicorn_serving
from support.paths import SAMPLES
from support.postgres import PostgresCluster, postgres_url

from crag.app.cli import main
from crag.app.server import build_server
from crag.config import Settings
from crag.events import CragResult, Grade
from crag.index.grade_cache import FILE_NAME, AsyncGradeCache, grade_key
from crag.index.grade_cache_postgres import PostgresGradeCache
from crag.steps.grading import CachedGrader

BASE = dict(grader="llm", model="gpt-4o-mini", prompt_version="grade-v1",
            question="Who founded Lumen?", content="Lumen was founded by Ada.")
LOGGER = "crag.index.grade_cache_postgres"


def key(i: int | str) -> str:
    return grade_key(**{**BASE, "content": f"chunk {i}"})


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with postgres_url() as url:
        yield url


@pytest.fixture
async def empty(pg_url: str) -> str:
    """The database, its grade cache emptied."""
    cache = PostgresGradeCache(pg_url)
    await cache.aclear()
    await cache.aclose()
    return pg_url


class CountingGrader:
    """Grades every chunk 0.75 and counts the chunks it was asked about."""

    name = "counting"

    def __init__(self) -> None:
        self.asked = 0

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        self.asked += len(chunks)
        return [Grade(chunk_id=c.node.node_id, score=0.75, grader=self.name) for c in chunks]


def chunks(n: int) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=f"Lumen fact number {i}.", id_=f"c{i}"), score=1.0) for i in range(n)]


def test_it_is_an_async_grade_cache() -> None:
    assert isinstance(PostgresGradeCache("postgresql://crag@127.0.0.1/x"), AsyncGradeCache)


# --- in a database that answers ------------------------------------------------------------------


def _read(url: str, keys: list[str], out: multiprocessing.Queue) -> None:
    out.put(asyncio.run(PostgresGradeCache(url).aget_many(keys)))


async def test_a_kept_grade_is_found_by_another_process_and_a_miss_is_absent(empty: str) -> None:
    cache = PostgresGradeCache(empty)
    await cache.aput_many({key(1): 0.8, key(2): 1.7})  # kept in [0, 1]
    await cache.aclose()

    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    reader = context.Process(target=_read, args=(empty, [key(1), key(2), key(3)], out))
    reader.start()
    found = await asyncio.to_thread(out.get, timeout=60)
    reader.join(30)
    assert found == {key(1): 0.8, key(2): 1.0}


async def test_the_least_recently_used_grades_go_first_past_the_bound(empty: str) -> None:
    cache = PostgresGradeCache(empty, max_entries=3)
    keys = [key(i) for i in range(4)]
    for i in range(3):
        await cache.aput_many({keys[i]: i / 10})
    await cache.aget_many([keys[0]])  # used again: now the newest
    await cache.aput_many({keys[3]: 0.4})

    assert set(await cache.aget_many(keys)) == {keys[0], keys[2], keys[3]}
    assert (await cache.astats()).entries == 3
    assert await cache.aclear() == 3
    await cache.aclose()


def _writer(url: str, worker: int, count: int) -> None:
    async def write() -> None:
        cache = PostgresGradeCache(url, max_entries=10_000, timeout=10.0)
        for i in range(count):
            await cache.aput_many({key(f"w{worker} {i}"): i / count, key(f"both {i}"): 0.5})
            await cache.aget_many([key(f"w{1 - worker} {i}"), key(f"both {i}")])
        assert not cache._warned, "a write or a read was dropped"

    asyncio.run(write())


async def test_two_processes_writing_at_once_lose_nothing(empty: str) -> None:
    count = 150
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_writer, args=(empty, w, count)) for w in (0, 1)]
    for p in writers:
        p.start()
    for p in writers:
        await asyncio.to_thread(p.join, 120)
        assert p.exitcode == 0

    cache = PostgresGradeCache(empty, max_entries=10_000)
    keys = [key(f"w{w} {i}") for w in (0, 1) for i in range(count)] + [key(f"both {i}") for i in range(count)]
    assert len(await cache.aget_many(keys)) == 3 * count
    await cache.aclose()


async def test_a_cached_grader_asks_its_grader_once_per_chunk_and_question(empty: str) -> None:
    grader = CountingGrader()
    cached = CachedGrader(grader, PostgresGradeCache(empty), model="m")

    first = await cached.grade("Who founded Lumen?", chunks(3))
    again = await cached.grade("who founded LUMEN", chunks(3))

    assert grader.asked == 3
    assert [g.cached for g in first] == [False] * 3 and [g.cached for g in again] == [True] * 3
    assert [g.score for g in again] == [0.75] * 3
    await cached.cache.aclose()


async def test_a_row_that_holds_no_grade_is_a_miss_and_is_replaced(empty: str) -> None:
    import asyncpg

    damaged = ["5", "-3", "Infinity", "-Infinity", "NaN", "1e308"]
    grader = CountingGrader()
    cached = CachedGrader(grader, PostgresGradeCache(empty), model="m")
    await cached.grade("Who founded Lumen?", chunks(len(damaged)))  # every grade kept: now damage them
    keys = [grade_key(grader=grader.name, model="m", prompt_version=cached.version,
                      question="Who founded Lumen?", content=c.node.get_content()) for c in chunks(len(damaged))]
    db = await asyncpg.connect(empty)
    try:
        for k, value in zip(keys, damaged):
            await db.execute("UPDATE crag_grades SET score = $1::float8 WHERE key = $2", float(value), k)
    finally:
        await db.close()

    grades = await cached.grade("Who founded Lumen?", chunks(len(damaged)))  # the question goes on
    assert [g.score for g in grades] == [0.75] * len(damaged) and not any(g.cached for g in grades)
    assert grader.asked == 2 * len(damaged)
    assert await cached.cache.aget_many(keys) == dict.fromkeys(keys, 0.75)  # each row replaced
    await cached.cache.aclose()


# --- in a database that does not answer ----------------------------------------------------------


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


async def test_nothing_listening_is_a_miss_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    grader = CountingGrader()
    cache = PostgresGradeCache("postgresql://crag:pw@127.0.0.1:1/crag", timeout=2.0, retry_after=0.0)
    cached = CachedGrader(grader, cache, model="m")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            grades = await cached.grade("Who founded Lumen?", chunks(2))
            assert [g.score for g in grades] == [0.75, 0.75] and not any(g.cached for g in grades)

    assert grader.asked == 6
    warned = _warnings(caplog)
    assert len(warned) == 1 and "grading goes on without it" in warned[0]
    assert "pw" not in warned[0]  # the URL is named without its password


async def test_a_database_stopped_then_restarted_is_missed_then_used_again(
    private_postgres: PostgresCluster, caplog: pytest.LogCaptureFixture
) -> None:
    grader = CountingGrader()
    cached = CachedGrader(grader, PostgresGradeCache(private_postgres.url, retry_after=0.2), model="m")
    await cached.grade("Who founded Lumen?", chunks(2))

    private_postgres.stop()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(2):
            grades = await cached.grade("Who founded Lumen?", chunks(2))
            assert not any(g.cached for g in grades)
            await asyncio.sleep(0.3)  # past retry_after: the database is asked again, and fails
    assert grader.asked == 6
    assert len(_warnings(caplog)) == 1

    private_postgres.start()
    await asyncio.sleep(0.3)
    await cached.grade("Who founded Lumen?", chunks(2))  # the pool reconnects (and may miss once)
    grades = await cached.grade("Who founded Lumen?", chunks(2))
    assert all(g.cached for g in grades)
    await cached.cache.aclose()


async def test_a_frozen_database_costs_one_bounded_wait_not_one_per_question(
    private_postgres: PostgresCluster, caplog: pytest.LogCaptureFixture
) -> None:
    grader = CountingGrader()
    cache = PostgresGradeCache(private_postgres.url, timeout=0.5, retry_after=60.0)
    cached = CachedGrader(grader, cache, model="m")
    await cached.grade("Who founded Lumen?", chunks(1))

    asked = []
    ask = cache._with_pool

    async def counted(work):  # noqa: ANN001, ANN202 - a spy on each time the database is asked
        asked.append(work)
        return await ask(work)

    cache._with_pool = counted
    private_postgres.freeze()
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            for _ in range(5):
                grades = await cached.grade("Who founded Helio?", chunks(2))
                assert [g.score for g in grades] == [0.75, 0.75]
    finally:
        private_postgres.thaw()
    # The first lookup waited out `timeout` and gave up; the next four did not ask at all.
    assert len(asked) == 1, f"5 questions asked a frozen database {len(asked)} times"
    assert len(_warnings(caplog)) == 1


# --- crag serve on PostgreSQL, and crag cache --store ---------------------------------------------


def _is_grading(prompt: str) -> bool:
    return "Rate how relevant the document is" in prompt


def _model(prompt: str) -> str:
    return "1" if _is_grading(prompt) else "Lumen gives a 12-year warranty [1]."


def test_a_served_run_on_postgresql_grades_a_question_asked_again_from_its_cache(
    empty: str, own_sample_index_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    question = {"start_event": {"query": "What warranty does Lumen give on the Helio H10?"}}
    with LoopbackServer(openai_chat(_model)) as model:
        settings = Settings.load(
            env={"OPENAI_BASE_URL": model.url + "/v1", "OPENAI_API_KEY": "sk-test"},
            index={"path": own_sample_index_dir}, web_search={"corpus": SAMPLES / "web.jsonl"},
            server={"store": empty},
        )
        grading = lambda: sum(_is_grading(message_text(r)) for r in model.requests_to("/chat/completions"))  # noqa: E731
        with uvicorn_serving(build_server(settings).app) as url:
            first = httpx.post(f"{url}/workflows/crag/run", json=question, timeout=60)
            graded = grading()
            again = httpx.post(f"{url}/workflows/crag/run", json=question, timeout=60)

    assert first.status_code == again.status_code == 200
    result = CragResult.model_validate(again.json()["result"]["value"]["result"])
    assert graded > 0 and grading() == graded, "the same question again makes no grading call"
    assert result.cost.cache_hits == graded and all(g.cached for g in result.grades)
    assert not (own_sample_index_dir / FILE_NAME).exists(), "grades went to SQLite, not PostgreSQL"

    assert main(["cache", "stats", "--store", empty]) == 0
    assert re.search(rf"crag_grades: {graded} grade\(s\) of at most 100,000", capsys.readouterr().out)
    assert main(["cache", "clear", "--store", empty]) == 0
    assert capsys.readouterr().out.startswith(f"cleared {graded} grade(s)")


def test_crag_cache_on_a_database_that_is_down_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "stats", "--store", "postgresql://crag:pw@127.0.0.1:1/crag"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error:") and "is the database up?" in err and "pw" not in err


@pytest.mark.parametrize("url", [
    "postgresql://crag@127.0.0.1:1/crag?password=hunter2-in-query",
    "postgresql://crag@127.0.0.1:1/crag?sslmode=disable&password=hunter2%2Fin-query",
    "postgresql://crag:hunter2-in-user@127.0.0.1:1/crag?password=hunter2-in-query",
])
def test_crag_cache_hides_a_password_given_in_the_query_too(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "stats", "--store", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error:") and "hunter2" not in err
