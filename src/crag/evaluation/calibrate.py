"""Fits the grader's two thresholds on labelled (question, retrieved chunk) pairs.

The pairs come from the situation the grader faces in use: each question is asked of an
index from which the gold passages of a random share of the questions were removed
(`drop_gold`, 0.5 by default), so half the questions have nothing relevant to find and
every chunk of theirs should score low. A chunk is labelled relevant when it is from the
question's gold passage (`label="gold"`, the default) or when it contains a gold answer
string (`label="answer"`).

* `upper` (some chunk at or above it: Correct) maximises the accuracy of "score >= upper
  means relevant" over all pairs, or, given `target_precision`, is the lowest threshold
  whose precision reaches it (a Correct verdict that is rarely wrong).
* `lower` (every chunk below it: Incorrect) is the highest threshold that still keeps
  `lower_recall` (0.98 by default) of the relevant chunks at or above it: an Incorrect
  verdict throws the retrieved chunks away, so it must rarely throw away a relevant one,
  while an Ambiguous verdict on an irrelevant chunk costs only a web search it needed anyway.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from llama_index.core.schema import NodeWithScore
from pydantic import BaseModel, Field

from crag.config import Settings
from crag.errors import ConfigError
from crag.evaluation.datasets import (
    Question,
    check_gold_in_corpus,
    drop_gold,
    load_corpus,
    load_questions,
)
from crag.evaluation.metrics import (
    BinaryReport,
    VerdictAgreement,
    binary_report,
    contains_answer,
    verdict_agreement,
)
from crag.evaluation.runner import build_index
from crag.events import Grade
from crag.index import ChunkIndex
from crag.steps.graded_retrieval import GradedRetrieval
from crag.steps.grading import decide_verdict

Label = Literal["gold", "answer"]
Objective = Literal["accuracy", "balanced"]


@dataclass
class Retrieval:
    """One question's retrieved chunks, from an index that may lack its gold passage."""

    dataset: str
    question: Question
    chunks: list[NodeWithScore]
    gold_dropped: bool


class LabelledChunk(BaseModel):
    """One graded retrieved chunk and the truth about it."""

    dataset: str
    question_id: str
    score: float
    is_gold: bool
    has_answer: bool

    def label(self, label: Label) -> bool:
        return self.is_gold if label == "gold" else self.has_answer


async def retrieve_questions(
    dataset: Path, corpus: Path, settings: Settings, *, drop_fraction: float, seed: int
) -> tuple[ChunkIndex, list[Retrieval]]:
    """Retrieve the top-k chunks of every question, with the chosen gold passages removed, and
    postprocessed as a run's are (`GradedRetrieval.find`): the chunks a run would grade."""
    from crag.workflows.factory import build_workflow

    questions = load_questions(dataset)
    passages = load_corpus(corpus)
    check_gold_in_corpus(questions, passages)
    drop = drop_gold(questions, drop_fraction, seed)
    with tempfile.TemporaryDirectory(prefix="crag-calibrate-") as tmp:
        index = build_index(passages, drop.doc_ids, Path(tmp), settings)
    retrieval = build_workflow(settings, index=index).retrieval
    retrievals = [
        Retrieval(dataset.name, q, await retrieval.find(q.question), drop.is_dropped(q))
        for q in questions
    ]
    return index, retrievals


async def label_chunks(retrievals: Sequence[Retrieval], retrieval: GradedRetrieval) -> list[LabelledChunk]:
    """Grade every retrieved chunk as a run would (`retrieval`'s grader, cache included) and
    label it."""
    labelled: list[LabelledChunk] = []
    for r in retrievals:
        graded = await retrieval.grade(r.question.question, r.chunks)
        for chunk, grade in zip(graded.chunks, graded.grades):
            labelled.append(
                LabelledChunk(
                    dataset=r.dataset,
                    question_id=r.question.id,
                    score=grade.score,
                    is_gold=(chunk.node.metadata.get("doc_id") or chunk.node.ref_doc_id)
                    == r.question.doc_id,
                    has_answer=contains_answer(chunk.node.get_content(), r.question.answers),
                )
            )
    return labelled


def fit_upper(
    labels: Sequence[bool], scores: Sequence[float], *, target_precision: float | None = None,
    objective: Objective = "accuracy",
) -> float:
    """The upper threshold: best accuracy (or balanced accuracy, the mean of the recalls of
    both classes, with `objective="balanced"`), or the lowest one reaching `target_precision`.

    Thresholds are tried half-way between consecutive distinct scores, so a fitted value
    never sits exactly on a training score.

    Raises:
        ConfigError: no positive label, or the target precision is out of reach.
    """
    y = np.asarray(labels, dtype=bool)
    if not y.any():
        raise ConfigError("No relevant chunk among the labelled pairs; nothing to calibrate on.")
    thresholds, tp, fp = _sweep(y, np.asarray(scores, dtype=float))
    if target_precision is None:
        negatives = len(y) - y.sum()
        if objective == "balanced":
            accuracy = (tp / y.sum() + (negatives - fp) / max(negatives, 1)) / 2
        else:
            accuracy = (tp + (negatives - fp)) / len(y)
        # Of equally accurate thresholds, the highest: a Correct verdict skips the web search.
        return float(thresholds[int(np.argmax(accuracy))])  # thresholds run high to low
    predicted = tp + fp
    precision = np.divide(tp, predicted, out=np.zeros_like(tp, dtype=float), where=predicted > 0)
    reaching = np.flatnonzero((precision >= target_precision) & (predicted > 0))
    if not len(reaching):
        raise ConfigError(
            f"No threshold reaches precision {target_precision} (the best is {precision.max():.3f}); "
            "lower --target-precision."
        )
    return float(thresholds[reaching[-1]])  # the lowest threshold that reaches it


def fit_lower(
    labels: Sequence[bool], scores: Sequence[float], *, recall: float, upper: float
) -> float:
    """The highest threshold at or below `upper` keeping `recall` of the relevant chunks above it.

    Raises:
        ConfigError: `recall` is outside (0, 1], or no positive label.
    """
    if not 0.0 < recall <= 1.0:
        raise ConfigError(f"--lower-recall must be in (0, 1], not {recall}.")
    positive = np.sort(np.asarray(scores, dtype=float)[np.asarray(labels, dtype=bool)])
    if not len(positive):
        raise ConfigError("No relevant chunk among the labelled pairs; nothing to calibrate on.")
    allowed_below = math.floor((1.0 - recall) * len(positive) + 1e-9)
    return float(min(positive[allowed_below], upper))


def fit_thresholds(
    labels: Sequence[bool], scores: Sequence[float], *, target_precision: float | None = None,
    lower_recall: float = 0.98, decimals: int = 3,
) -> tuple[float, float]:
    """`upper` (`fit_upper`, rounded up) and `lower` (`fit_lower`, rounded down) to `decimals`:
    what `crag calibrate` prints and writes, for any grader's scores."""
    upper = _round(fit_upper(labels, scores, target_precision=target_precision), decimals, up=True)
    return upper, _round(fit_lower(labels, scores, recall=lower_recall, upper=upper), decimals, up=False)


def _sweep(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidate thresholds (descending) with the true and false positives of `s >= t`."""
    values = np.unique(s)[::-1]  # distinct scores, highest first
    below = np.append(values[1:], values[-1] - 1.0)
    thresholds = np.append(values[0] + 1e-6, (values + below) / 2.0)  # first: nothing positive
    thresholds = np.clip(thresholds, 0.0, 1.0)
    positive, negative = np.sort(s[y]), np.sort(s[~y])
    tp = len(positive) - np.searchsorted(positive, thresholds, side="left")
    fp = len(negative) - np.searchsorted(negative, thresholds, side="left")
    return thresholds, tp, fp


class Calibration(BaseModel):
    """Fitted thresholds and how the grader does at them, as `crag calibrate --json` prints it."""

    upper: float
    lower: float
    label: Label
    objective: str = Field(description="'accuracy' or 'precision >= P'.")
    lower_recall: float
    datasets: list[str]
    drop_gold: float
    seed: int
    questions: int
    pairs: int
    positives: int
    at_upper: BinaryReport = Field(description="Against the fitted label.")
    at_upper_other_label: BinaryReport = Field(
        description="Against the other label, for comparison."
    )
    recall_at_lower: float
    verdicts: VerdictAgreement


def calibrate(datasets: Sequence[tuple[Path, Path]], settings: Settings, **options: Any) -> Calibration:
    """`acalibrate` from synchronous code (a script, the CLI); the same arguments."""
    from crag._offload import run_sync

    return run_sync(lambda: acalibrate(datasets, settings, **options))


def check_options(datasets: Sequence[tuple[Path, Path]], target_precision: float | None) -> None:
    """`ConfigError` saying what is wrong with a calibration's data or options, if anything."""
    if not datasets:
        raise ConfigError("Nothing to calibrate on; pass --dataset FILE --corpus FILE.")
    if target_precision is not None and not 0.0 < target_precision <= 1.0:
        raise ConfigError(f"--target-precision must be in (0, 1], not {target_precision}.")


async def acalibrate(
    datasets: Sequence[tuple[Path, Path]],
    settings: Settings,
    *,
    label: Label = "gold",
    target_precision: float | None = None,
    lower_recall: float = 0.98,
    drop_fraction: float = 0.5,
    seed: int = 0,
    decimals: int = 3,
) -> Calibration:
    """Fit `upper` and `lower` on the pooled labelled pairs of every (questions, corpus) pair."""
    from crag.workflows.factory import build_workflow

    check_options(datasets, target_precision)
    pairs: list[LabelledChunk] = []
    retrievals_all: list[Retrieval] = []
    for dataset, corpus in datasets:
        index, retrievals = await retrieve_questions(
            dataset, corpus, settings, drop_fraction=drop_fraction, seed=seed
        )
        pairs.extend(await label_chunks(retrievals, build_workflow(settings, index=index).retrieval))
        retrievals_all.extend(retrievals)
    labels = [p.label(label) for p in pairs]
    scores = [p.score for p in pairs]
    upper, lower = fit_thresholds(
        labels, scores, target_precision=target_precision, lower_recall=lower_recall, decimals=decimals
    )
    other: Label = "answer" if label == "gold" else "gold"
    positive_scores = np.asarray(scores)[np.asarray(labels, dtype=bool)]
    return Calibration(
        upper=upper,
        lower=lower,
        label=label,
        objective="accuracy" if target_precision is None else f"precision >= {target_precision}",
        lower_recall=lower_recall,
        datasets=[str(d) for d, _ in datasets],
        drop_gold=drop_fraction,
        seed=seed,
        questions=len(retrievals_all),
        pairs=len(pairs),
        positives=int(sum(labels)),
        at_upper=binary_report(labels, scores, upper),
        at_upper_other_label=binary_report([p.label(other) for p in pairs], scores, upper),
        recall_at_lower=float((positive_scores >= lower).mean()),
        verdicts=_verdicts(pairs, retrievals_all, upper, lower),
    )


class BandCalibration(BaseModel):
    """The cascade's fitted band, as `crag calibrate --band --json` prints it."""

    band_low: float
    band_high: float
    target_agreement: float
    agreement: float = Field(description="Questions whose cascade verdict is the model-only verdict.")
    calls_per_question: float = Field(description="Model calls the cascade makes per question ([grader] batch: "
                                      "one per question that sends any chunk).")
    chunks_per_question: float = Field(description="What model-only grading sends.")
    questions: int
    datasets: list[str]


async def acalibrate_band(
    datasets: Sequence[tuple[Path, Path]],
    settings: Settings,
    *,
    target: float = 0.95,
    drop_fraction: float = 0.5,
    seed: int = 0,
) -> BandCalibration:
    """Grade every question's retrieved chunks offline and with the configured model, and fit
    the band that agrees with the model's verdicts on `target` of them for the fewest calls."""
    from crag.evaluation.cascade import fit_band
    from crag.workflows.factory import build_workflow

    if not settings.llm.configured:
        raise ConfigError("The band is fitted against the model's own grades: configure a model "
                          "(OPENAI_API_KEY, or OPENAI_BASE_URL for a compatible server).")

    def grading(kind: str) -> Settings:  # the model alone, every chunk, nothing cached
        grader = settings.grader.model_copy(update={"kind": kind, "batch": False})
        return settings.model_copy(update={"grader": grader, "cache": settings.cache.model_copy(update={"enabled": False})})

    offline: list[list[float]] = []
    model: list[list[float]] = []
    for dataset, corpus in datasets:
        index, retrievals = await retrieve_questions(
            dataset, corpus, settings, drop_fraction=drop_fraction, seed=seed
        )
        evaluator = build_workflow(grading("lexical"), index=index).retrieval
        graded_by_model = build_workflow(grading("llm"), index=index).retrieval
        for r in retrievals:
            offline.append([g.score for g in (await evaluator.grade(r.question.question, r.chunks)).grades])
            model.append([g.score for g in (await graded_by_model.grade(r.question.question, r.chunks)).grades])
    upper, lower = graded_by_model.upper, graded_by_model.lower  # the model's verdicts
    fit = fit_band(offline, model, upper=upper, lower=lower, target=target, batch=settings.grader.batch)
    return BandCalibration(
        band_low=fit.low, band_high=fit.high, target_agreement=target, agreement=fit.agreement,
        calls_per_question=fit.calls_per_question,
        chunks_per_question=sum(map(len, offline)) / len(offline),
        questions=fit.questions, datasets=[str(d) for d, _ in datasets],
    )


def _verdicts(
    pairs: Sequence[LabelledChunk], retrievals: Sequence[Retrieval], upper: float, lower: float
) -> VerdictAgreement:
    """The verdict each question would get at these thresholds, against retrieval truth."""
    by_question: dict[tuple[str, str], list[LabelledChunk]] = {}
    for p in pairs:
        by_question.setdefault((p.dataset, p.question_id), []).append(p)
    verdicts, retrieved, best = [], [], []
    for r in retrievals:
        chunks = by_question.get((r.dataset, r.question.id), [])
        grades = [
            Grade(chunk_id=str(i), score=c.score, grader="calibration")
            for i, c in enumerate(chunks)
        ]
        verdicts.append(decide_verdict(grades, upper, lower).value)
        retrieved.append(any(c.is_gold for c in chunks))
        best.append(max((c.score for c in chunks), default=0.0))
    return verdict_agreement(verdicts, retrieved, best)


def _round(value: float, decimals: int, *, up: bool) -> float:
    """Round to `decimals`: `upper` up (a Correct verdict no less sure than fitted), `lower`
    down (no fewer relevant chunks kept above it than fitted)."""
    factor = 10**decimals
    rounded = (math.ceil if up else math.floor)(value * factor - (1e-9 if up else -1e-9)) / factor
    return min(max(rounded, 0.0), 1.0)
