"""Fits the offline evaluator's weights and thresholds, and says what they are worth on unseen articles.

    python -m crag.evaluation.fit [--data ../shared/data] [--folds 5] [--seeds 0,1,2,3,4] [--write] [--json]

A development tool (`pip install "crag-workflows[eval]"` for scikit-learn, which grading never needs).
The pairs are those `crag calibrate` grades: each question's retrieved chunks over an index
from which the gold passages of half the questions were removed, once per seed (0-4: each
seed drops other passages, so a question is seen with and without its gold), labelled "is the
question's gold passage". The features are `crag.steps.grading.features.NAMES`, computed by
the grader's own code.

What it reports, per dataset, is **cross-validated**: the questions are split into `folds`
groups by article (SQuAD's article, PopQA's subject, HotpotQA's first supporting title), so no
article is on both sides, whatever the seed; a model and its thresholds are fitted on the other folds and score
the held-out one. The same procedure is applied to the hand-set grade it replaces (its
thresholds fitted on the other folds), so "before" and "after" are measured alike. The weights
it ships are then fitted on every pair; their in-sample figures are printed too, and labelled
so. `--write` puts weights, thresholds and figures into the package's `evaluator.json`.

The shipped weights were fitted with numpy's and OpenBLAS's AVX2 kernels. On a machine with
AVX-512 their sums round otherwise, near-ties in retrieval fall the other way, and a refit moves
by about 0.006; to reproduce them there, run it with `NPY_DISABLE_CPU_FEATURES="AVX512_SPR
AVX512_ICL X86_V4" OPENBLAS_CORETYPE=Haswell` (tests/evaluation/test_fit.py does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import numpy as np
from llama_index.core.schema import NodeWithScore, TextNode

from crag.config import Settings
from crag.evaluation.calibrate import Objective, fit_lower, fit_upper, retrieve_questions
from crag.evaluation.datasets import drop_gold, load_questions
from crag.evaluation.metrics import binary_report
from crag.steps.grading.features import NAMES
from crag.steps.grading.learned import SHIPPED, LogisticModel
from crag.steps.grading.lexical import LexicalEvaluator
from crag.text import TermStats

DATASETS = ("squad", "popqa", "hotpotqa")
DEFAULT_DATA = Path.cwd().parent / "shared" / "data"
C = 1.0  # inverse L2 strength on standardised features; fourteen features, 17,500 pairs: barely binding
SEEDS = (0, 1, 2, 3, 4)
LOWER_RECALL = 0.98  # as `crag calibrate`: Incorrect must rarely discard a gold chunk


@dataclass
class Pairs:
    """Every graded (question, chunk) pair of the dev sets, one row each."""

    x: np.ndarray  # features.NAMES
    hand_set: np.ndarray  # the grade before issue 34 (LexicalEvaluator.score)
    gold: np.ndarray  # the chunk is the question's gold passage
    dataset: np.ndarray
    group: np.ndarray  # dataset and article: what a fold keeps together
    question: np.ndarray  # dataset, seed and question: the chunks graded together
    dropped: np.ndarray  # the question's gold passage was left out of the index


def collect(data: Path, *, drop: float = 0.5, seeds: Sequence[int] = SEEDS, cache: Path | None = None) -> Pairs:
    """Retrieve every dev question's chunks as `crag calibrate` does, once per seed, and compute their features."""
    rows: list[tuple] = []
    for name, seed in ((name, seed) for seed in seeds for name in DATASETS):
        stats, retrieved = _retrieved(data, name, drop, seed, cache)
        left_out = drop_gold(load_questions(data / f"{name}-dev.jsonl"), drop, seed).doc_ids
        grader = LexicalEvaluator(stats, model="hand-set")
        for number, (question, article, gold_doc, chunks) in enumerate(retrieved):
            x = grader.features(question, chunks)
            for row, chunk, before in zip(x, chunks, grader.grade_sync(question, chunks)):
                is_gold = chunk.node.metadata.get("doc_id") == gold_doc
                rows.append((list(row), before.score, is_gold, name, f"{name}:{article}",
                             f"{name}:{seed}:{number}", gold_doc in left_out))
    columns = list(zip(*rows)) or [[]] * 7
    return Pairs(*(np.array(c) for c in columns))


def _retrieved(data: Path, name: str, drop: float, seed: int, cache: Path | None) -> tuple[TermStats, list]:
    """(term statistics, [(question, article, gold doc id, chunks)]), from `cache` when there."""
    stored = cache / f"{name}-drop{drop}-seed{seed}.pkl" if cache else None
    if stored and stored.exists():
        stats, rows = pickle.loads(stored.read_bytes())
        return TermStats.from_dict(stats), [(q, a, g, [_node(*c) for c in cs]) for q, a, g, cs in rows]
    questions = data / f"{name}-dev.jsonl"
    index, retrievals = asyncio.run(retrieve_questions(
        questions, data / f"{name}-dev-corpus.jsonl", Settings.load(env={}), drop_fraction=drop, seed=seed,
    ))
    articles = {r["id"]: r.get("title") or r["doc_id"] for r in map(json.loads, questions.read_text().splitlines())}
    rows = [(r.question.question, articles[r.question.id], r.question.doc_id,
             [(c.node.node_id, c.node.get_content(), dict(c.node.metadata)) for c in r.chunks]) for r in retrievals]
    if stored:
        stored.parent.mkdir(parents=True, exist_ok=True)
        stored.write_bytes(pickle.dumps((index.term_stats.to_dict(), rows)))
    return index.term_stats, [(q, a, g, [_node(*c) for c in cs]) for q, a, g, cs in rows]


def _node(node_id: str, text: str, metadata: dict) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=node_id, text=text, metadata=metadata), score=0.0)


def fit_model(x: np.ndarray, y: np.ndarray, objective: Objective = "accuracy") -> LogisticModel:
    """Standardise, fit a logistic regression, fold the standardising into the weights; and fit
    `upper` (best `objective`) and `lower` (keeps 98% of gold chunks) on the grades as the
    grader rounds them, exactly as `crag calibrate` would on the same pairs.

    The classes are weighted to balance (one gold chunk in ten), which raised the
    cross-validated ROC AUC on every set; the threshold, not the weighting, sets how sure a
    Correct verdict is."""
    from sklearn.linear_model import LogisticRegression  # a development dependency (the eval extra)

    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    fitted = LogisticRegression(C=C, class_weight="balanced", max_iter=5000).fit((x - mean) / scale, y)
    weights = fitted.coef_[0] / scale
    bias = float(fitted.intercept_[0] - (fitted.coef_[0] * mean / scale).sum())
    model = LogisticModel(features=NAMES, weights=tuple(map(float, weights)), bias=bias, upper=1.0, lower=0.0)
    upper, lower = thresholds(y, grades(model, x), objective)
    return LogisticModel(features=NAMES, weights=model.weights, bias=bias, upper=upper, lower=lower)


def grades(model: LogisticModel, x: np.ndarray) -> np.ndarray:
    """The grades the grader gives: rounded to four decimals."""
    return np.round(model.predict(x), 4)


def thresholds(y: np.ndarray, scores: np.ndarray, objective: Objective = "accuracy") -> tuple[float, float]:
    """`upper` and `lower` as `crag calibrate` fits and rounds them."""
    upper = _round(fit_upper(y, scores, objective=objective), up=True)
    return upper, _round(fit_lower(y, scores, recall=LOWER_RECALL, upper=upper), up=False)


def _round(value: float, *, up: bool) -> float:
    rounded = (math.ceil if up else math.floor)(value * 1000 - (1e-9 if up else -1e-9)) / 1000
    return min(max(rounded, 0.0), 1.0)


def folds(pairs: Pairs, k: int) -> list[np.ndarray]:
    """Held-out masks of `k` folds, whole articles each (scikit-learn's GroupKFold)."""
    from sklearn.model_selection import GroupKFold

    splitter = GroupKFold(n_splits=k)
    return [np.isin(np.arange(len(pairs.gold)), test) for _, test in splitter.split(pairs.x, pairs.gold, pairs.group)]


def cross_validate(pairs: Pairs, k: int, objective: Objective = "accuracy") -> dict[str, np.ndarray]:
    """Out-of-fold grades and the upper threshold each was judged at: the learned grade and the
    hand-set one, each with thresholds fitted on the other folds."""
    out = {key: np.zeros(len(pairs.gold)) for key in ("learned", "learned_upper", "hand_set_upper")}
    for held in folds(pairs, k):
        model = fit_model(pairs.x[~held], pairs.gold[~held], objective)
        out["learned"][held] = grades(model, pairs.x[held])
        out["learned_upper"][held] = model.upper
        out["hand_set_upper"][held] = thresholds(pairs.gold[~held], pairs.hand_set[~held], objective)[0]
    return out


def figures(pairs: Pairs, mask: np.ndarray, scores: np.ndarray, upper: np.ndarray | float) -> dict[str, float]:
    """Balanced accuracy and accuracy at `upper` (one per pair when cross-validated), ROC AUC,
    and the share of questions without their gold passage whose best grade reaches `upper`
    (a Correct verdict that skips the web search the question needed)."""
    labels, scores = pairs.gold[mask], scores[mask]
    predicted = scores >= (upper[mask] if isinstance(upper, np.ndarray) else upper)
    report = binary_report(labels, predicted.astype(float), 0.5)  # the decisions, already made
    auc = binary_report(labels, scores, 0.5).roc_auc
    missing = pairs.dropped[mask]
    questions = np.unique(pairs.question[mask][missing])
    reached = np.unique(pairs.question[mask][missing & predicted])
    return {"balanced_accuracy": round(report.balanced_accuracy or 0.0, 4), "accuracy": round(report.accuracy or 0.0, 4),
            "roc_auc": round(auc or 0.0, 4), "recall": round(report.recall or 0.0, 4), "pairs": int(len(labels)),
            "gold": int(labels.sum()),
            "correct_without_gold": round(len(reached) / len(questions), 4) if len(questions) else 0.0,
            "best_balanced_accuracy": round(_best_balanced_accuracy(labels, scores), 4),
            "question_roc_auc": round(_question_auc(pairs, mask, scores), 4)}


def _best_balanced_accuracy(labels: np.ndarray, scores: np.ndarray) -> float:
    """The ceiling of a threshold: the best balanced accuracy of any one, chosen on these very grades."""
    order = np.argsort(-scores, kind="stable")
    y, s = labels[order], scores[order]
    last = np.r_[s[1:] != s[:-1], True]  # a threshold takes every grade equal to it
    tpr = np.cumsum(y)[last] / max(y.sum(), 1)
    tnr = 1 - np.cumsum(~y)[last] / max((~y).sum(), 1)
    return float(max(0.5, ((tpr + tnr) / 2).max())) if len(y) else 0.0


def _question_auc(pairs: Pairs, mask: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC of each question's best grade for "its gold passage was retrieved", over the
    questions that either retrieved it or had it dropped: how well a verdict can be told."""
    questions, at = np.unique(pairs.question[mask], return_inverse=True)
    best = np.zeros(len(questions))
    np.maximum.at(best, at, scores)
    gold = np.zeros(len(questions), bool)
    np.logical_or.at(gold, at, pairs.gold[mask])
    dropped = np.zeros(len(questions), bool)
    np.logical_or.at(dropped, at, pairs.dropped[mask])
    told = gold | dropped
    return binary_report(gold[told], best[told], 0.5).roc_auc or 0.0


def report(pairs: Pairs, k: int, objective: Objective = "accuracy", seeds: Sequence[int] = SEEDS) -> dict[str, Any]:
    """Cross-validated figures of the learned and the hand-set grade, per dataset and pooled;
    the shipped model (fitted on every pair) and its in-sample figures."""
    cv = cross_validate(pairs, k, objective)
    shipped = fit_model(pairs.x, pairs.gold, objective)
    in_sample = grades(shipped, pairs.x)
    result: dict[str, Any] = {"folds": k, "features": list(NAMES), "label": "is the gold passage",
                              "objective": objective, "drop_gold": 0.5, "seeds": list(seeds),
                              "cross_validated": {}, "in_sample": {}}
    for name in (*DATASETS, "pooled"):
        mask = np.ones(len(pairs.gold), bool) if name == "pooled" else pairs.dataset == name
        result["cross_validated"][name] = {
            "learned": figures(pairs, mask, cv["learned"], cv["learned_upper"]),
            "hand_set": figures(pairs, mask, pairs.hand_set, cv["hand_set_upper"]),
        }
        result["in_sample"][name] = {"learned": figures(pairs, mask, in_sample, shipped.upper)}
    result["model"] = shipped.to_dict()
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Cross-validated ({result['folds']} folds by article; seeds {result['seeds']}), label: "
             f"{result['label']}; upper for best {result['objective']}; balanced accuracy at the fold's own "
             "upper / ROC AUC / share of gold-dropped questions whose best grade reaches upper:", "",
             "| set | hand-set grade (before) | learned grade (now) | learned, in-sample |", "|---|---:|---:|---:|"]
    for name, cv in result["cross_validated"].items():
        cells = [cv["hand_set"], cv["learned"], result["in_sample"][name]["learned"]]
        lines.append(f"| {name} | " + " | ".join(
            f"{100 * c['balanced_accuracy']:.1f}% / {c['roc_auc']:.3f} / {100 * c['correct_without_gold']:.1f}%"
            for c in cells) + " |")
    lines += ["", "ceiling of the learned grade, cross-validated: the best balanced accuracy of any one threshold "
              "chosen on the held-out grades themselves / ROC AUC of a question's best grade for \"its gold "
              "passage was retrieved\": " + "; ".join(
                  f"{name} {100 * cv['learned']['best_balanced_accuracy']:.1f}% / {cv['learned']['question_roc_auc']:.3f}"
                  for name, cv in result["cross_validated"].items())]
    model = result["model"]
    lines += ["", f"shipped: upper = {model['upper']}, lower = {model['lower']}; weights " + ", ".join(
        f"{n} {w:+.2f}" for n, w in zip(model["features"], model["weights"])) + f", bias {model['bias']:+.2f}"]
    return "\n".join(lines)


def shipped_path() -> Path:
    return Path(__file__).resolve().parents[1] / "steps" / "grading" / SHIPPED


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--objective", choices=get_args(Objective), default="accuracy",
                        help="what `upper` maximises: accuracy (shipped: a sure Correct verdict) or balanced accuracy")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="the gold drops to pool, comma-separated")
    parser.add_argument("--cache", type=Path, help="keep the retrieved chunks here between runs")
    parser.add_argument("--write", action="store_true", help=f"write the weights into the package's {SHIPPED}")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    result = report(collect(args.data, seeds=seeds, cache=args.cache), args.folds, args.objective, seeds)
    print(json.dumps(result, indent=2) if args.json else markdown(result))
    if args.write:
        model = dict(result["model"])
        model["about"] = {k: v for k, v in result.items() if k != "model"}
        model["about"]["command"] = "python -m crag.evaluation.fit --write" + (
            f" --objective {args.objective}" if args.objective != "accuracy" else "")
        shipped_path().write_text(json.dumps(model, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
