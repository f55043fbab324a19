"""Fits a reranker's `upper`/`lower` on labelled questions, beside the offline evaluator's.

    crag calibrate --reranker --dataset questions.jsonl --corpus passages.jsonl [--folds 5]

The pairs are those `crag calibrate` grades (`calibrate.retrieve_questions`): each question's
retrieved chunks, over an index from which the gold passages of a share of the questions were
removed, labelled "is the gold passage" (or "holds an answer"). The reranker scores each
question's chunks in ONE request, as the rerank grader does in a run; the offline evaluator
grades the same chunks. Both grades get their thresholds by `calibrate.fit_thresholds` (best
accuracy, or a target precision, for `upper`; `lower_recall` of relevant chunks kept at or
above `lower`), and are measured the same way:

* cross-validated balanced accuracy at `upper`: the questions are split into `k` folds (a
  question's chunks all in one fold, so no question is on both sides), each fold's pairs are
  judged at the `upper` fitted on the other folds, and the decisions of all folds pooled;
* ROC AUC of the grades themselves (no threshold, nothing fitted on these questions: the
  reranker's scores are its own, the evaluator's weights ship with crag).

The thresholds printed to paste are fitted on every pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from crag.config import Settings
from crag.errors import ConfigError
from crag.evaluation.calibrate import (
    Label,
    Retrieval,
    check_options,
    fit_thresholds,
    label_chunks,
    retrieve_questions,
)
from crag.evaluation.metrics import binary_report, roc_auc
from crag.interfaces import Reranker
from crag.steps.grading.rerank import usable

RERANKER, EVALUATOR = "reranker", "offline evaluator"
# A cross-encoder's sigmoid crowds near 0 and 1 (0.9990 and 0.9995 are both "relevant"): `upper`,
# rounded up at 3 decimals, could pass every score it was fitted to separate.
DECIMALS = 4


@dataclass(frozen=True)
class ScoredPairs:
    """Every labelled (question, chunk) pair, graded by each grader compared."""

    question: np.ndarray  # the pair's question ("dataset:id"): what a fold keeps together
    label: np.ndarray  # bool: relevant
    scores: dict[str, np.ndarray]  # grader name -> its grade of each pair


class GraderFigures(BaseModel):
    """One row of the table `crag calibrate --reranker` prints."""

    grader: str
    balanced_accuracy: float | None = Field(description="Cross-validated, at each fold's own upper.")
    roc_auc: float | None
    upper: float = Field(description="Fitted on every pair: the value to paste.")
    lower: float
    fold_uppers: list[float] = Field(description="The upper each held-out fold was judged at.")


class RerankCalibration(BaseModel):
    """The reranker's fitted thresholds and both graders' figures, as `--json` prints them."""

    graders: list[GraderFigures]
    label: Label
    objective: str
    lower_recall: float
    folds: int
    datasets: list[str]
    drop_gold: float
    seed: int
    questions: int
    pairs: int
    positives: int
    rerank_requests: int = Field(description="One per question with chunks.")

    @property
    def reranker(self) -> GraderFigures:
        return self.graders[0]


def folds_by_question(questions: Sequence[str] | np.ndarray, k: int, seed: int = 0) -> list[np.ndarray]:
    """Held-out masks over the pairs for `k` folds of whole questions (shuffled by `seed`).

    Raises:
        ConfigError: fewer than two folds, or fewer questions than folds.
    """
    keys, at = np.unique(np.asarray(questions), return_inverse=True)
    if k < 2 or len(keys) < k:
        raise ConfigError(f"--folds must be at least 2 and at most the number of questions ({len(keys)}), not {k}.")
    fold_of = np.empty(len(keys), dtype=int)
    fold_of[np.random.default_rng(seed).permutation(len(keys))] = np.arange(len(keys)) % k
    return [fold_of[at] == fold for fold in range(k)]


def grader_figures(
    name: str, pairs: ScoredPairs, *, k: int, seed: int = 0, target_precision: float | None = None,
    lower_recall: float = 0.98, decimals: int = DECIMALS,
) -> GraderFigures:
    """Cross-validated balanced accuracy, ROC AUC and thresholds fitted on all, for one grader."""
    scores, labels = pairs.scores[name], pairs.label

    def fit(mask: np.ndarray) -> tuple[float, float]:
        return fit_thresholds(labels[mask], scores[mask], target_precision=target_precision,
                              lower_recall=lower_recall, decimals=decimals)

    predicted = np.zeros(len(labels), dtype=bool)
    fold_uppers = []
    for held in folds_by_question(pairs.question, k, seed):
        upper = fit(~held)[0]
        predicted[held] = scores[held] >= upper
        fold_uppers.append(upper)
    upper, lower = fit(np.ones(len(labels), dtype=bool))
    decided = binary_report(labels, predicted.astype(float), 0.5)  # the decisions, already made
    return GraderFigures(grader=name, balanced_accuracy=decided.balanced_accuracy, roc_auc=roc_auc(labels, scores),
                         upper=upper, lower=lower, fold_uppers=fold_uppers)


async def rerank_question(reranker: Reranker, retrieval: Retrieval, *, max_chars: int = 2000) -> list[float]:
    """The reranker's score of each of the question's chunks, in their order: one request.

    Raises:
        RerankError: the reranker failed, or gave not one score in [0, 1] per chunk.
    """
    documents = [c.node.get_content()[:max_chars] for c in retrieval.chunks]  # as `RerankGrader` sends them
    if not documents:
        return []
    return usable(await reranker.rerank(retrieval.question.question, documents), len(documents))


def configured_reranker(settings: Settings) -> Reranker:
    """The reranker `[reranker]` names, built as a run builds it.

    Raises:
        ConfigError: no reranker is configured.
    """
    if not settings.reranker.configured:
        raise ConfigError("No reranker to calibrate: set [reranker] base_url (a rerank server) or model_dir "
                          "(a cross-encoder run here) in crag.toml.")
    from crag.workflows.factory import build_reranker  # the factory's own: what a run grades with

    return build_reranker(settings.reranker)


async def acalibrate_reranker(
    datasets: Sequence[tuple[Path, Path]],
    settings: Settings,
    reranker: Reranker,
    *,
    name: str = RERANKER,
    folds: int = 5,
    label: Label = "gold",
    target_precision: float | None = None,
    lower_recall: float = 0.98,
    drop_fraction: float = 0.5,
    seed: int = 0,
    max_chars: int = 2000,
) -> RerankCalibration:
    """Score every question's retrieved chunks with `reranker` (one request per question) and
    with the offline evaluator, and fit and cross-validate both graders' thresholds.

    Raises:
        ConfigError: nothing to calibrate on, no relevant chunk, or bad options.
        RerankError: the reranker failed on some question (a calibration never falls back).
    """
    from crag.workflows.factory import build_workflow

    check_options(datasets, target_precision)
    # The evaluator grades exactly as it ships: no model, nothing cached.
    offline = settings.model_copy(update={
        "grader": settings.grader.model_copy(update={"kind": "lexical"}),
        "cache": settings.cache.model_copy(update={"enabled": False}),
    })
    questions: list[str] = []
    labels: list[bool] = []
    evaluator: list[float] = []
    reranked: list[float] = []
    requests = 0
    for dataset, corpus in datasets:
        index, retrievals = await retrieve_questions(dataset, corpus, settings, drop_fraction=drop_fraction, seed=seed)
        for pair in await label_chunks(retrievals, build_workflow(offline, index=index).retrieval):
            questions.append(f"{pair.dataset}:{pair.question_id}")
            labels.append(pair.label(label))
            evaluator.append(pair.score)
        for r in retrievals:  # label_chunks keeps each question's chunks in this order
            reranked.extend(await rerank_question(reranker, r, max_chars=max_chars))
            requests += bool(r.chunks)
    pairs = ScoredPairs(np.array(questions), np.array(labels, dtype=bool),
                        {name: np.array(reranked, dtype=float), EVALUATOR: np.array(evaluator, dtype=float)})
    options: dict[str, Any] = {"k": folds, "seed": seed, "target_precision": target_precision,
                               "lower_recall": lower_recall}
    return RerankCalibration(
        graders=[grader_figures(name, pairs, **options), grader_figures(EVALUATOR, pairs, **options)],
        label=label,
        objective="accuracy" if target_precision is None else f"precision >= {target_precision}",
        lower_recall=lower_recall,
        folds=folds,
        datasets=[str(d) for d, _ in datasets],
        drop_gold=drop_fraction,
        seed=seed,
        questions=len(set(questions)),
        pairs=len(labels),
        positives=int(sum(labels)),
        rerank_requests=requests,
    )


def calibrate_reranker(
    datasets: Sequence[tuple[Path, Path]], settings: Settings, reranker: Reranker, **options: Any
) -> RerankCalibration:
    """`acalibrate_reranker` from synchronous code (a script, the CLI); the same arguments."""
    from crag._offload import run_sync

    return run_sync(lambda: acalibrate_reranker(datasets, settings, reranker, **options))


def table(result: RerankCalibration) -> str:
    """Both graders' figures, as a Markdown table, and what the figures were measured on."""
    lines = ["| grader | CV balanced accuracy | ROC AUC | upper | lower |", "|---|---:|---:|---:|---:|"]
    for row in result.graders:
        lines.append(f"| {row.grader} | {_pct(row.balanced_accuracy)} | {_auc(row.roc_auc)} | {row.upper} | {row.lower} |")
    lines += ["", (f"{result.folds} folds by question; {result.questions} questions, {result.pairs} chunks, "
                   f"{result.positives} relevant (label: {result.label}); {result.rerank_requests} rerank requests. "
                   f"upper for best {result.objective}, lower keeps {_pct(result.lower_recall)} of relevant chunks; "
                   "both fitted on every chunk.")]
    return "\n".join(lines)


def toml_lines(result: RerankCalibration) -> str:
    """The `[reranker]` thresholds to paste into crag.toml."""
    return f"[reranker]\nupper = {result.reranker.upper}\nlower = {result.reranker.lower}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _auc(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"
