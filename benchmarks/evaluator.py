"""Offline relevance evaluators compared on the shared dev sets: which grade to ship.

    .venv/bin/python benchmarks/evaluator.py [--data ../shared/data] [--sets squad,popqa,hotpotqa] [--smoke]

Pairs: each question's top-5 chunks from the default hybrid retriever, over an index from
which the gold passages of half the questions (seed 0) were removed, exactly as
`crag calibrate` builds them: half the questions have nothing relevant to find. Each chunk
is labelled twice: is it from the gold passage ("gold"); does it contain a gold answer
string ("answer", normalised, on word boundaries).

Candidates, each an absolute score in [0, 1]:

* lexical, exact terms: IDF-weighted coverage of the question by the chunk (0.4), by its
  best two-sentence window (0.4) and by its term pairs (0.2); the grader before this study.
* lexical + prefix credit: the same, where a question term absent from the text but
  related by prefix to a text term ("revolutionari"/"revolut") counts a share of its weight.
* + named document: the same, where a chunk whose document the question names (every word
  of its title, one of them rare in the corpus) has half its gap to 1 closed.
* BM25, normalised: sum of idf * tf (k1 + 1) / (tf + k1) over the question's terms, divided
  by its maximum sum of idf * (k1 + 1).
* WordLlama cosine: the bundled static embeddings, question against chunk.
* logistic combination: a logistic regression over the lexical parts, BM25, cosine, the
  title's overlap with the question and an answer-type cue (the question asks when / how
  many / who / where, and the best window holds a year, a number or a capitalised name
  the question lacks). Fitted leave-one-dataset-out (trained on the other sets, tested on
  this one), and in-sample on all sets for reference.
* A cross-encoder was considered: none can be installed with its weights from a package
  (FlashRank's wheel is 14 KB and downloads its ONNX models from Hugging Face at first use;
  sentence-transformers and fastembed download too, and the former needs torch), so none
  can run offline from a clean install; not measured.

For each candidate: ROC AUC per label; accuracy and balanced accuracy at the threshold that
maximises pooled accuracy on "gold" (one threshold for all sets, as shipped; the
leave-one-out model uses the threshold fitted on its training sets); and the question-level
AUC of the best chunk score for "the gold passage was retrieved", which is what the verdict
rests on.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import _harness
import numpy as np

from crag import Settings
from crag.evaluation.calibrate import Retrieval, fit_upper, retrieve_questions
from crag.evaluation.metrics import binary_report, contains_answer, roc_auc
from crag.models import WordLlamaEmbedding
from crag.steps.grading import LexicalEvaluator

# The cue's candidates are the shipped `answer_type` feature's own (year, number, name).
from crag.steps.grading.features import _CAPITALISED as _NAME
from crag.steps.grading.features import _NUMBER, _YEAR
from crag.text import TermStats, sentences, terms, weighted_coverage, words


@dataclass
class Pair:
    dataset: str
    question_id: str
    question: str
    text: str
    title: str | None
    is_gold: bool
    has_answer: bool


@dataclass
class SetPairs:
    name: str
    stats: TermStats
    pairs: list[Pair]


def collect(data: Path, name: str, drop: float, seed: int) -> SetPairs:
    index, retrievals = asyncio.run(
        retrieve_questions(
            data / f"{name}-dev.jsonl",
            data / f"{name}-dev-corpus.jsonl",
            Settings.load(env={}),
            drop_fraction=drop,
            seed=seed,
        )
    )
    return SetPairs(name, index.term_stats, [p for r in retrievals for p in _pairs(name, r)])


def _pairs(name: str, r: Retrieval) -> list[Pair]:
    return [
        Pair(
            dataset=name,
            question_id=r.question.id,
            question=r.question.question,
            text=c.node.get_content(),
            title=c.node.metadata.get("title"),
            is_gold=c.node.metadata.get("doc_id") == r.question.doc_id,
            has_answer=contains_answer(c.node.get_content(), r.question.answers),
        )
        for c in r.chunks
    ]


# --- candidate scores ----------------------------------------------------------------


def lexical(partial: float, min_prefix: int = 4, named: float = 0.0) -> Callable[[SetPairs], np.ndarray]:
    def score(sp: SetPairs) -> np.ndarray:
        ev = LexicalEvaluator(sp.stats, partial=partial, min_prefix=min_prefix, named=named)
        return np.array([ev.score(p.question, p.text, p.title, subject=p.title) for p in sp.pairs])

    return score


def bm25_normalised(sp: SetPairs, k1: float = 1.2) -> np.ndarray:
    out = []
    for p in sp.pairs:
        wanted = sorted(set(terms(p.question)))
        tf = Counter(terms(p.text))
        top = sum(sp.stats.idf(t) * (k1 + 1) for t in wanted)
        got = sum(sp.stats.idf(t) * tf[t] * (k1 + 1) / (tf[t] + k1) for t in wanted)
        out.append(got / top if top else 0.0)
    return np.array(out)


_EMBED = WordLlamaEmbedding()


def wordllama_cosine(sp: SetPairs) -> np.ndarray:
    q = _EMBED.embed_many([p.question for p in sp.pairs])
    t = _EMBED.embed_many([p.text for p in sp.pairs])
    return np.clip((q * t).sum(axis=1), 0.0, 1.0)


def answer_type_cue(question: str, window: str) -> float:
    """1 when the window holds a candidate of the type the question asks for, else 0."""
    q = question.lower()
    asked = set(words(question))
    if re.search(r"\b(when|what year|which year|what century)\b", q):
        return float(bool(_YEAR.search(window)))
    if re.search(r"\bhow (many|much|long|old|far|large|tall)\b|\bwhat (percentage|number)\b", q):
        return float(bool(_NUMBER.search(window)))
    if re.search(r"\b(who|whom|whose|where)\b", q):
        return float(any(m.lower() not in asked for m in _NAME.findall(window)))
    return 0.0


def features(sp: SetPairs) -> np.ndarray:
    rows = []
    cos = wordllama_cosine(sp)
    bm = bm25_normalised(sp)
    for p, c, b in zip(sp.pairs, cos, bm):
        wanted = terms(p.question)
        title = set(terms(p.title)) if p.title else set()
        text = terms(p.text)
        sents = sentences(p.text) or [""]
        sets = [set(terms(s)) for s in sents]
        windows = [set().union(*sets[i : i + 2]) | title for i in range(len(sets))]
        covs = [weighted_coverage(wanted, w, sp.stats) for w in windows]
        best = int(np.argmax(covs))
        pairs = set(zip(wanted, wanted[1:]))
        phrase = len(pairs & set(zip(text, text[1:]))) / len(pairs) if pairs else 0.0
        rows.append(
            [
                weighted_coverage(wanted, set(text) | title, sp.stats),
                covs[best],
                phrase,
                b,
                c,
                len(title & set(wanted)) / len(title) if title else 0.0,
                answer_type_cue(p.question, " ".join(sents[best : best + 2])),
            ]
        )
    return np.array(rows)


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-2, steps: int = 50) -> np.ndarray:
    """Weights (bias first) by Newton's method with a small L2 penalty."""
    x = np.c_[np.ones(len(x)), x]
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-x @ w))
        grad = x.T @ (p - y) + l2 * np.r_[0.0, w[1:]]
        hess = (x * (p * (1 - p))[:, None]).T @ x + l2 * np.eye(len(w))
        w -= np.linalg.solve(hess, grad)
    return w


def predict(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(np.c_[np.ones(len(x)), x] @ w)))


# --- measuring --------------------------------------------------------------------------


def question_auc(sp: SetPairs, scores: np.ndarray) -> float | None:
    best: dict[str, float] = {}
    retrieved: dict[str, bool] = {}
    for p, s in zip(sp.pairs, scores):
        best[p.question_id] = max(best.get(p.question_id, 0.0), float(s))
        retrieved[p.question_id] = retrieved.get(p.question_id, False) or p.is_gold
    ids = sorted(best)
    return roc_auc([retrieved[i] for i in ids], [best[i] for i in ids])


@dataclass
class Result:
    """One candidate's scores on every set, and the threshold it is judged at on each."""

    name: str
    scores: dict[str, np.ndarray]
    thresholds: dict[str, float]


def auc_cells(result: Result, sets: Sequence[SetPairs]) -> list[str]:
    cells = []
    for sp in sets:
        s = result.scores[sp.name]
        gold = roc_auc([p.is_gold for p in sp.pairs], s)
        answer = roc_auc([p.has_answer for p in sp.pairs], s)
        cells.append(f"{gold:.3f} / {answer:.3f} / {question_auc(sp, s):.3f}")
    return cells


def accuracy_cells(result: Result, sets: Sequence[SetPairs]) -> list[str]:
    cells = []
    for sp in sets:
        s, t = result.scores[sp.name], result.thresholds[sp.name]
        gold = binary_report([p.is_gold for p in sp.pairs], s, t)
        answer = binary_report([p.has_answer for p in sp.pairs], s, t)
        cells.append(
            f"{100 * gold.accuracy:.1f} / {100 * gold.balanced_accuracy:.1f} / "
            f"{100 * answer.accuracy:.1f}"
        )
    return cells


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    cli = _harness.parser(__doc__)
    cli.add_argument("--data", type=Path, default=_harness.DATA)
    cli.add_argument("--sets", default="squad,popqa,hotpotqa")
    cli.add_argument("--drop-gold", type=float, default=0.5)
    cli.add_argument("--seed", type=int, default=0)
    args = _harness.parse(cli, smoke={"sets": "squad,popqa"})  # two: a leave-one-set-out fit needs another set
    with _harness.measured(__file__, args) as run:
        compare(args, run)


def compare(args, run: _harness.Run) -> None:  # noqa: ANN001
    sets = [collect(args.data, name, args.drop_gold, args.seed) for name in args.sets.split(",")]
    gold = [p.is_gold for sp in sets for p in sp.pairs]

    candidates: dict[str, Callable[[SetPairs], np.ndarray]] = {
        "lexical, exact terms (before)": lexical(0.0),
        "lexical + prefix credit 0.5": lexical(0.5),
        "lexical + prefix credit 0.8": lexical(0.8),
        "lexical + prefix credit 0.8 + named document 0.5 (shipped)": lexical(0.8, named=0.5),
        "lexical + prefix credit 1.0": lexical(1.0),
        "lexical + prefix credit 0.8, prefixes >= 5": lexical(0.8, 5),
        "BM25, normalised": bm25_normalised,
        "WordLlama cosine": wordllama_cosine,
    }
    results = []
    for name, fn in candidates.items():
        scores = {sp.name: fn(sp) for sp in sets}
        pooled = fit_upper(gold, np.concatenate([scores[sp.name] for sp in sets]))
        results.append(Result(f"{name}, t={pooled:.3f}", scores, {sp.name: pooled for sp in sets}))

    feats = {sp.name: features(sp) for sp in sets}
    labels = {sp.name: np.array([p.is_gold for p in sp.pairs], dtype=float) for sp in sets}
    loo = Result("logistic combination, leave-one-dataset-out", {}, {})
    for sp in sets:
        train = [o for o in sets if o.name != sp.name] or [sp]
        x = np.vstack([feats[o.name] for o in train])
        y = np.concatenate([labels[o.name] for o in train])
        w = fit_logistic(x, y)
        loo.thresholds[sp.name] = fit_upper(y.astype(bool), predict(w, x))
        loo.scores[sp.name] = predict(w, feats[sp.name])
    results.append(loo)
    x = np.vstack([feats[sp.name] for sp in sets])
    y = np.concatenate([labels[sp.name] for sp in sets])
    w = fit_logistic(x, y)
    t = fit_upper(y.astype(bool), predict(w, x))
    results.append(
        Result(
            f"logistic combination, in-sample, t={t:.3f}",
            {sp.name: predict(w, feats[sp.name]) for sp in sets},
            {sp.name: t for sp in sets},
        )
    )

    names = [sp.name for sp in sets]
    table(
        "ROC AUC: chunk is gold / chunk contains an answer / best grade of a question vs gold retrieved",
        ["candidate", *names],
        [[r.name, *auc_cells(r, sets)] for r in results],
    )
    constant = Result(
        "always 'irrelevant'",
        {sp.name: np.zeros(len(sp.pairs)) for sp in sets},
        {sp.name: 0.5 for sp in sets},
    )
    table(
        "At the threshold t (best pooled accuracy on 'gold'): accuracy / balanced accuracy on "
        "'gold' / accuracy on 'answer' (%)",
        ["candidate", *names],
        [[r.name, *accuracy_cells(r, sets)] for r in [*results, constant]],
    )
    print(
        "\ncross-encoder: not measured; none can be installed with its weights from a package "
        "(see the docstring)."
    )
    run.figures = {r.name: dict(zip(names, auc_cells(r, sets))) for r in results}


if __name__ == "__main__":
    main()
