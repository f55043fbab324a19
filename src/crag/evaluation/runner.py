"""Runs every system on every question once, and records what each run did.

The index is built once per evaluation, from the corpus minus the dropped gold passages;
each system's workflow is built once and reused for every question. Questions run
concurrently up to a bound (offline components are CPU-bound, so the default there is
one at a time, which also keeps per-question latencies honest).

What a run retrieved and what its synthesizer read are observed by thin wrappers
around the workflow's retriever and synthesizer (observing.py).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any, Literal

from llama_index.core.schema import NodeWithScore
from pydantic import BaseModel, Field

from crag.budget import Budget, watching
from crag.config import Settings
from crag.cost import CostRecord
from crag.errors import ConfigError
from crag.evaluation.datasets import (
    GoldDrop,
    Passage,
    Question,
    check_gold_in_corpus,
    drop_gold,
    load_corpus,
    load_questions,
    union_corpus,
    write_corpus,
)
from crag.evaluation.metrics import (
    best_sentence_f1,
    contains_answer,
    first_sentence_contains_answer,
)
from crag.evaluation.observing import instrument, observing
from crag.evaluation.systems import System, resolve_systems
from crag.index import ChunkIndex
from crag.ingestion import ingest

Split = Literal["gold-present", "gold-dropped"]


class ChunkJudgement(BaseModel):
    """One retrieved chunk: its grade, and the truth to judge the grade by."""

    score: float
    is_gold: bool = Field(description="The chunk comes from the question's gold passage.")
    is_support: bool = Field(
        False, description="The chunk comes from one of the question's supporting passages."
    )
    has_answer: bool = Field(description="The chunk's text contains a gold answer string.")


class Outcome(BaseModel):
    """What one system did with one question."""

    system: str
    question_id: str
    split: Split
    answer: str = ""
    correct: bool = Field(False, description="A gold answer occurs in the answer.")
    first_sentence_correct: bool = Field(
        False, description="A gold answer occurs in the answer's first sentence."
    )
    best_sentence_f1: float = Field(
        0.0, description="SQuAD token F1 of the answer's best sentence, best gold answer."
    )
    gold_retrieved: bool | None = Field(
        None, description="The gold passage is among the retrieved chunks."
    )
    gold_in_context: bool | None = Field(
        None, description="The gold passage reached the synthesizer."
    )
    verdict: str | None = None
    chunks: list[ChunkJudgement] = Field(default_factory=list)
    llm_calls: int = 0
    search_calls: int = 0
    cost: CostRecord | None = Field(None, description="The run's model calls, tokens and money.")
    seconds: float = 0.0
    degraded: list[str] = Field(default_factory=list)
    error: str | None = None


@dataclass
class EvalOptions:
    """What to evaluate; mirrors the `crag eval` flags."""

    dataset: Path
    corpus: Path
    web_corpus: Path | Sequence[Path] | None = None
    drop_gold: float = 0.0
    seed: int = 0
    systems: str | Sequence[str] = ("rag", "crag")
    limit: int | None = None
    concurrency: int | None = None

    @property
    def web_corpora(self) -> list[Path]:
        """The files searched as the web: every --web-corpus, or else the corpus."""
        if self.web_corpus is None:
            return [self.corpus]
        if isinstance(self.web_corpus, (str, Path)):
            return [Path(self.web_corpus)]
        return [Path(p) for p in self.web_corpus] or [self.corpus]


@dataclass
class EvalRun:
    """Everything an evaluation produced, before summarising."""

    options: EvalOptions
    settings: Settings
    questions: list[Question]
    drop: GoldDrop
    systems: list[System]
    outcomes: list[Outcome]
    index_chunks: int
    seconds: float
    index_seconds: float
    concurrency: int = 1
    per_system_seconds: dict[str, float] = field(default_factory=dict)
    # Each grading system's (upper, lower), as its workflow reads its grader's scores.
    thresholds: dict[str, tuple[float, float]] = field(default_factory=dict)


def evaluate(options: EvalOptions, settings: Settings, *, progress: bool | None = None) -> EvalRun:
    """Run an evaluation to completion from synchronous code (the CLI, or a notebook cell)."""
    from crag._offload import run_sync

    return run_sync(lambda: aevaluate(options, settings, progress=progress))


async def aevaluate(
    options: EvalOptions, settings: Settings, *, progress: bool | None = None
) -> EvalRun:
    """Build the index once, then run every system on every question.

    Args:
        options: the files, the gold drop and the systems.
        settings: component settings; the web search is forced to the local web corpus
            (default: the full corpus, gold passages included), or to the union of several.
        progress: show a progress bar on stderr; None shows it when stderr is a terminal.

    Raises:
        CragError: a file is unusable, a system is unknown, or the settings are invalid.
    """
    started = perf_counter()
    systems = resolve_systems(options.systems)
    questions = load_questions(options.dataset)
    if options.limit is not None:
        if options.limit <= 0:
            raise ConfigError(f"--limit must be positive, not {options.limit}.")
        questions = questions[: options.limit]
    if options.concurrency is not None and options.concurrency <= 0:
        raise ConfigError(f"--concurrency must be positive, not {options.concurrency}.")
    passages = load_corpus(options.corpus)
    check_gold_in_corpus(questions, passages)
    drop = drop_gold(questions, options.drop_gold, options.seed)
    # The folder lives as long as the evaluation: a united web corpus is read by the
    # first search, not before.
    with tempfile.TemporaryDirectory(prefix="crag-eval-") as tmp:
        web = web_corpus_file(options.web_corpora, Path(tmp))
        settings = settings.model_copy(
            update={
                "web_search": settings.web_search.model_copy(
                    update={"kind": "local", "corpus": web}
                )
            }
        )
        index = build_index(passages, drop.doc_ids, Path(tmp), settings)
        index_seconds = perf_counter() - started
        concurrency = options.concurrency or _default_concurrency(settings)
        nodes = {n.node_id: n for n in index.nodes}

        outcomes: list[Outcome] = []
        per_system: dict[str, float] = {}
        thresholds: dict[str, tuple[float, float]] = {}
        bar = _progress_bar(len(systems) * len(questions), progress)
        try:
            for system in systems:
                workflow = instrument(system.build(settings, index))
                if hasattr(workflow, "upper") and hasattr(workflow, "lower"):
                    thresholds[system.name] = (workflow.upper, workflow.lower)
                system_started = perf_counter()
                outcomes += await _run_system(
                    system, workflow, questions, drop, nodes, concurrency, bar
                )
                per_system[system.name] = perf_counter() - system_started
        finally:
            bar.close()
    return EvalRun(
        options=options,
        settings=settings,
        questions=questions,
        drop=drop,
        systems=systems,
        outcomes=outcomes,
        index_chunks=len(index),
        seconds=perf_counter() - started,
        index_seconds=index_seconds,
        concurrency=concurrency,
        per_system_seconds=per_system,
        thresholds=thresholds,
    )


async def _run_system(
    system: System,
    workflow: Any,
    questions: Sequence[Question],
    drop: GoldDrop,
    nodes: dict[str, Any],
    concurrency: int,
    bar: Any,
) -> list[Outcome]:
    """Every question through one system, at most `concurrency` at a time, in question order."""
    limit = asyncio.Semaphore(concurrency)

    async def one(question: Question) -> Outcome:
        async with limit:
            outcome = await _run_one(system, workflow, question, drop, nodes)
        bar.update(1)
        return outcome

    return list(await asyncio.gather(*(one(q) for q in questions)))


def web_corpus_file(paths: Sequence[Path], folder: Path) -> Path:
    """The file the local web search reads: the one corpus given, or the union of several
    (each doc_id once, the first file winning) written to `folder`."""
    if len(paths) == 1:
        return paths[0]
    union = folder / "web.jsonl"
    write_corpus(union_corpus(paths), union)
    return union


def build_index(
    passages: Sequence[Passage], exclude: Iterable[str], folder: Path, settings: Settings
) -> ChunkIndex:
    """Ingest `passages` minus the `exclude` doc ids into an index under `folder`, and load it."""
    corpus = folder / "corpus.jsonl"
    write_corpus(passages, corpus, exclude=exclude)
    ingest(
        [corpus],
        folder / "index",
        chunk_size=settings.index.chunk_size,
        chunk_overlap=settings.index.chunk_overlap,
    )
    # Held in memory: the folder is temporary and goes before the evaluation ends.
    return ChunkIndex.load(folder / "index").in_memory()


def _default_concurrency(settings: Settings) -> int:
    """One at a time offline (CPU-bound: concurrency adds nothing but skewed latencies);
    eight when a model is configured, whose calls wait on the network; one with a model served
    on this machine, which often serves one request at a time: eight questions at once made 5
    of 20 runs reach the run limit against llama.cpp's server (issue 31). (The web search is
    always the local corpus here.)"""
    if settings.llm.configured and not settings.llm.local:
        return 8
    return 1


def _progress_bar(total: int, show: bool | None) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc="crag eval",
        unit="q",
        file=sys.stderr,
        disable=None if show is None else not show,
    )


async def _run_one(
    system: System, workflow: Any, question: Question, drop: GoldDrop, nodes: dict[str, Any]
) -> Outcome:
    split: Split = "gold-dropped" if drop.is_dropped(question) else "gold-present"
    outcome = Outcome(system=system.name, question_id=question.id, split=split)
    started = perf_counter()
    try:
        # what the run retrieved and read, and spent, even if it fails before its cost record
        with observing() as observation, watching() as budgets:
            result = await workflow.run(query=question.question)
    except Exception as exc:  # noqa: BLE001 - one failed question must not lose the evaluation
        outcome.error = f"{type(exc).__name__}: {exc}"[:300]
        outcome.cost = spent(budgets)
        outcome.llm_calls = outcome.cost.calls
        return outcome
    finally:
        outcome.seconds = perf_counter() - started
    outcome.answer = result.answer
    outcome.correct = contains_answer(result.answer, question.answers)
    outcome.first_sentence_correct = first_sentence_contains_answer(
        result.answer, question.answers
    )
    outcome.best_sentence_f1 = best_sentence_f1(result.answer, question.answers)
    trace = getattr(result, "trace", None)
    outcome.llm_calls = trace.llm_calls if trace is not None else 0
    outcome.search_calls = trace.search_calls if trace is not None else 0
    outcome.cost = getattr(result, "cost", None)
    outcome.degraded = list(getattr(result, "degraded", []) or [])
    if observation.context is not None:
        outcome.gold_in_context = any(s.doc_id == question.doc_id for s in observation.context)
    if observation.retrieved is not None:
        outcome.gold_retrieved = any(_doc_id(c) == question.doc_id for c in observation.retrieved)
    if system.grading:
        outcome.verdict = result.verdict.value
        scores = {g.chunk_id: g.score for g in result.grades}
        for chunk in observation.retrieved or []:
            if chunk.node.node_id in scores:
                node = nodes.get(chunk.node.node_id, chunk.node)
                outcome.chunks.append(
                    ChunkJudgement(
                        score=scores[chunk.node.node_id],
                        is_gold=_doc_id(chunk) == question.doc_id,
                        is_support=_doc_id(chunk) in question.support_doc_ids,
                        has_answer=contains_answer(node.get_content(), question.answers),
                    )
                )
    return outcome


def spent(budgets: Sequence[Budget]) -> CostRecord:
    """The calls and tokens of runs that ended without a cost record (timed out, failed), from
    their budgets, which count every call as it is made."""
    tokens_in = sum(b.spent_in for b in budgets)
    return CostRecord(
        calls=sum(b.spent_calls for b in budgets),
        tokens_in=tokens_in,
        tokens_out=sum(b.spent_tokens for b in budgets) - tokens_in,
        estimated=any(b.estimated for b in budgets),
        notes=["the run failed: its calls and tokens were counted by its budget"],
    )


def _doc_id(chunk: NodeWithScore) -> str | None:
    return chunk.node.metadata.get("doc_id") or chunk.node.ref_doc_id
