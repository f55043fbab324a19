"""The event loop stays free: models load before the first step, CPU work runs off the loop,
and concurrent runs on one workflow proceed together."""

from __future__ import annotations

import asyncio
import gc
import re
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from blockbuster import BlockingError
from pydantic import PrivateAttr

import crag._offload
import crag.index.lexical
import crag.models.local
import crag.steps.web_search.local
import crag.text
from crag import Settings
from crag._offload import hold_collection
from crag.app.cli import main
from crag.app.mcp_engine import Engine
from crag.config import PostprocessSettings
from crag.errors import StepError
from crag.events import CragResult, Verdict
from crag.models import WordLlamaEmbedding
from crag.steps.grading import LexicalEvaluator, LLMGrader
from crag.testing import FakeLLM
from crag.workflows import CorrectiveRAGWorkflow
from crag.workflows.factory import build_workflow

# One question per verdict on the sample handbook and its sample "web".
QUESTIONS = {
    "What warranty does Lumen give on the Helio H10?": Verdict.CORRECT,
    "What cathode does the Helio H10 battery use?": Verdict.AMBIGUOUS,
    "Who invented the lithium-ion battery?": Verdict.INCORRECT,
}
# Every offline postprocessing stage the sample index supports, so each runs in a run.
STAGES = ["similarity_cutoff", "rerank", "optimizer", "keywords", "reorder"]


@pytest.fixture
def offline_workflow(sample_settings: Settings) -> CorrectiveRAGWorkflow:
    """Built outside the loop, with every offline stage: building is where loading belongs."""
    post = PostprocessSettings(stages=STAGES, similarity_cutoff=0.0, exclude_keywords=["zzzz"])
    return build_workflow(sample_settings.model_copy(update={"postprocess": post}))


async def ask_each_verdict(workflow: CorrectiveRAGWorkflow) -> None:
    results: list[CragResult] = await asyncio.gather(*(workflow.run(query=q) for q in QUESTIONS))
    assert {r.query: r.verdict for r in results} == QUESTIONS


async def test_a_run_makes_no_blocking_call_on_the_event_loop(
    offline_workflow: CorrectiveRAGWorkflow, no_blocking: object
) -> None:
    await ask_each_verdict(offline_workflow)


def test_the_blocking_check_catches_a_step_that_reads_a_file_on_the_loop(
    sample_settings: Settings, tmp_path: Path, no_blocking: object
) -> None:
    """The check above is not vacuous: a retriever that reads a file in its step fails it."""
    note = tmp_path / "note.txt"
    note.write_text("x")

    class ReadsAFile:
        async def retrieve(self, query: str) -> list:
            note.read_text()
            return []

    workflow = build_workflow(sample_settings, retriever=ReadsAFile())
    with pytest.raises(StepError) as caught:
        workflow.ask("What warranty does Lumen give on the Helio H10?")
    assert isinstance(caught.value.__cause__, BlockingError)


def a_coroutine_of_crags_that_reads(path: Path) -> Callable[[], Any]:
    """A coroutine function that reads `path` on the loop, compiled as if it were crag's."""
    namespace: dict[str, Any] = {"path": path}
    exec(compile("async def read():\n    return path.read_text()\n", crag._offload.__file__, "exec"), namespace)
    return namespace["read"]


async def test_every_async_test_fails_when_crags_coroutine_blocks(tmp_path: Path) -> None:
    """No fixture asked for: conftest's BlockBuster is on for every async test."""
    (tmp_path / "note.txt").write_text("x")  # the test's own blocking call: allowed
    with pytest.raises(BlockingError):
        await a_coroutine_of_crags_that_reads(tmp_path / "note.txt")()


@pytest.mark.allow_blocking("checks that the marker turns the check off")
async def test_a_test_marked_allow_blocking_is_not_checked(tmp_path: Path) -> None:
    (tmp_path / "note.txt").write_text("x")
    assert await a_coroutine_of_crags_that_reads(tmp_path / "note.txt")() == "x"


def record_threads(monkeypatch: pytest.MonkeyPatch, function: Callable, threads: set[int]) -> None:
    """Replace `function` wherever crag's modules imported it by a wrapper noting its thread."""

    def noted(*args: object, **kwargs: object) -> object:
        threads.add(threading.get_ident())
        return function(*args, **kwargs)

    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "crag" and getattr(module, function.__name__, None) is function:
            monkeypatch.setattr(module, function.__name__, noted)


async def test_terms_sentences_and_embeddings_never_run_on_the_loop_thread(
    offline_workflow: CorrectiveRAGWorkflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: dict[str, set[int]] = {"terms": set(), "sentences": set(), "embed_many": set()}
    record_threads(monkeypatch, crag.text.terms, threads["terms"])
    record_threads(monkeypatch, crag.text.sentences, threads["sentences"])
    embed_many = WordLlamaEmbedding.embed_many

    def noted_embed(self: WordLlamaEmbedding, texts: list[str]) -> Any:
        threads["embed_many"].add(threading.get_ident())
        return embed_many(self, texts)

    monkeypatch.setattr(WordLlamaEmbedding, "embed_many", noted_embed)

    await ask_each_verdict(offline_workflow)

    assert all(threads.values()), threads  # each kind of work did happen during the runs
    loop_thread = threading.get_ident()
    assert {kind: loop_thread in seen for kind, seen in threads.items()} == dict.fromkeys(threads, False)


def test_a_built_workflow_has_loaded_everything_a_run_needs(
    sample_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `build_workflow` (and Punkt's tables, which load beside the first question), a run
    loads no model, splitter table, corpus or statistics."""
    workflow = build_workflow(sample_settings)
    crag.text.wait_until_loaded()

    def loading(*args: object, **kwargs: object) -> None:
        raise AssertionError("a run loaded what the build should have")

    monkeypatch.setattr(crag.models.local, "_bundled_wordllama", loading)
    monkeypatch.setattr("nltk.tokenize.PunktTokenizer", loading)
    monkeypatch.setattr(crag.index.lexical, "BM25", loading)
    monkeypatch.setattr(crag.steps.web_search.local, "BM25", loading)
    monkeypatch.setattr(crag.text.TermStats, "from_texts", loading)
    for question, verdict in QUESTIONS.items():
        assert workflow.ask(question).verdict is verdict


class CountingLLM(FakeLLM):
    """A FakeLLM that counts, per run, the calls it has in flight."""

    _in_flight: dict[str, int] = PrivateAttr(default_factory=dict)
    _peak: int = PrivateAttr(default=0)

    @property
    def peak_runs(self) -> int:
        """The most runs that had a call in flight at the same moment."""
        return self._peak

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        run = re.search(r"asker (\d+)", prompt).group(1)  # type: ignore[union-attr]
        self._in_flight[run] = self._in_flight.get(run, 0) + 1
        self._peak = max(self._peak, sum(1 for n in self._in_flight.values() if n))
        try:
            return await super().acomplete(prompt, formatted, **kwargs)
        finally:
            self._in_flight[run] -= 1


def test_building_a_workflow_leaves_the_process_garbage_collector_as_it_was(sample_index_dir: Path) -> None:
    """The collector's settings are the whole process's (a notebook's, a web app's, a test
    runner's): a library call leaves them to the process's owner. In a fresh interpreter, so
    that nothing this test runner did before counts."""
    code = (
        "import gc, sys, crag\n"
        "def state(): return gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()\n"
        "before = state()\n"
        "settings = crag.Settings.load(env={}, index={'path': sys.argv[1]}, web_search={'corpus': sys.argv[2]})\n"
        "crag.build_workflow(settings).ask('What warranty does Lumen give on the Helio H10?')\n"
        "print(before == state(), before, state())\n"
    )
    web = Path(crag.__file__).parent / "sample_data" / "web.jsonl"
    done = subprocess.run([sys.executable, "-c", code, str(sample_index_dir), str(web)],
                          capture_output=True, text=True, check=True)
    assert done.stdout.startswith("True "), done.stdout


@pytest.fixture
def first_settling(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As in a process that has not settled its heap yet; this test runner's collector is put
    back as it was afterwards."""
    thresholds = gc.get_threshold()
    gc.unfreeze()
    monkeypatch.setattr(crag._offload, "_heap_settled", False)
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_settling_the_heap_leaves_what_a_workflow_loaded_out_of_full_garbage_collections(
    sample_settings: Settings, first_settling: None
) -> None:
    """A full collection runs on the loop's thread and walks every object it tracks: what is
    loaded for good (the workflow, its components, the imported code) is frozen instead, in
    a process that chooses it (`crag serve`, `crag ask`, `crag mcp`)."""
    workflow = build_workflow(sample_settings)
    crag.settle_heap()
    tracked = gc.get_objects()  # every generation the collector walks; frozen objects are not in it
    assert not any(o is workflow or o is workflow.retriever for o in tracked)
    assert gc.get_freeze_count() > len(tracked)  # the bulk of the heap, not a few objects
    assert gc.get_threshold() == crag._offload.SERVING_THRESHOLDS  # and full passes are rarer


def test_a_workflow_built_after_the_heap_was_settled_is_collected_once_dropped(
    sample_settings: Settings, first_settling: None
) -> None:
    """Only the first settling freezes: a workflow that replaces the first (a server's reload,
    a notebook cell run again) must not stay in memory, its index with it."""
    build_workflow(sample_settings)
    crag.settle_heap()
    workflow = build_workflow(sample_settings)
    crag.settle_heap()  # again, as a cell run twice would: it freezes nothing more
    workflow.ask("What warranty does Lumen give on the Helio H10?")
    dropped = weakref.ref(workflow.retriever.index)
    del workflow
    gc.collect()
    assert dropped() is None


@pytest.fixture
def collection_held() -> Iterator[None]:
    """The collector held as `crag ask`, `crag mcp` and `crag serve` hold it for start-up."""
    hold_collection()
    try:
        yield
    finally:
        gc.enable()  # whatever the test found, the rest of the suite collects garbage


def test_a_collection_held_for_start_up_resumes_once_the_heap_is_settled(
    sample_settings: Settings, collection_held: None
) -> None:
    assert not gc.isenabled()
    build_workflow(sample_settings)
    assert not gc.isenabled()  # building is the library's part; the collector is the owner's
    crag.settle_heap()
    assert gc.isenabled()


def test_crag_ask_turns_the_collector_it_held_for_start_up_back_on(
    sample_index_dir: Path, first_settling: None
) -> None:
    """`main` holds the collector off while `crag ask` loads, and settles the heap after: the
    command owns its process."""
    try:
        question = "What warranty does Lumen give on the Helio H10?"
        assert main(["ask", question, "--index", str(sample_index_dir), "--quiet"]) == 0
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.enable()


@pytest.mark.parametrize("owns_process", [False, True])
async def test_the_mcp_engine_settles_the_heap_only_for_a_process_of_its_own(
    sample_settings: Settings, first_settling: None, owns_process: bool
) -> None:
    engine = Engine(sample_settings)
    engine.start_loading(settle_heap=owns_process)  # True in `crag mcp`
    await engine.workflow()
    assert (gc.get_freeze_count() > 0) is owns_process


async def test_a_collection_held_for_start_up_resumes_when_loading_fails(
    tmp_path: Path, collection_held: None
) -> None:
    engine = Engine(Settings.load(env={}, index={"path": tmp_path / "missing"}))
    engine.start_loading()
    with pytest.raises(Exception, match="index"):
        await engine.workflow()
    assert gc.isenabled()


async def test_twenty_concurrent_runs_have_their_model_calls_in_flight_together(
    sample_settings: Settings, sample_index: Any
) -> None:
    llm = CountingLLM(reply=lambda prompt: "9", latency=0.5)
    grader = LLMGrader(llm, fallback=LexicalEvaluator(sample_index.term_stats))
    workflow = build_workflow(sample_settings, index=sample_index, grader=grader)
    questions = [f"What warranty does Lumen give, asker {i}?" for i in range(20)]

    results = await asyncio.gather(*(workflow.run(query=q) for q in questions))

    assert [r.verdict for r in results] == [Verdict.CORRECT] * 20
    assert llm.peak_runs == 20
