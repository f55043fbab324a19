"""What each retrieval stage buys: recall@5, MRR and answer-in-context on the shared dev sets.

    python benchmarks/retrieval.py [--data ../shared/data] [--sets squad,popqa,hotpotqa]
                                   [--configs all|NAME,...] [--png docs/retrieval.png] [--smoke]

Every configuration is built the way `crag ask` builds it — `Settings` overrides through
`crag.workflows.factory.build_workflow` — and run offline: the workflow's retriever, then its
postprocessors, give the chunks the grader would see. For each set the corpus is ingested
three ways (token chunks with document summaries, sentence windows, agentic chunks).

Metrics, per question, on the first five chunks after postprocessing:
    recall@5            the gold passage is among them (by document id)
    MRR                 1 / rank of the first chunk from the gold passage (0 if absent)
    answer-in-context   some gold answer string occurs in their text (case-insensitive)

The offline grader is judged on the default retriever's top-5 pairs, at the `upper` it reads
its own grades with (`thresholds_of`: fitted with its weights): labels are imbalanced (about 1
in 5 is the gold passage), so balanced accuracy and ROC AUC are printed beside accuracy, with
the always-"irrelevant" baseline.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _harness
import numpy as np

from crag import ChunkIndex, Settings, ingest
from crag.ingestion.configured import node_parser_for
from crag.steps.grading import LexicalEvaluator, thresholds_of
from crag.workflows.factory import build_workflow

TOP = 5


@dataclass(frozen=True)
class Config:
    name: str
    index: str  # which ingest: "chunks", "windows" or "agentic"
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)


def _stages(*stages: str, **options: Any) -> dict[str, Any]:
    return {"postprocess": {"stages": list(stages), **options}}


CONFIGS = [
    Config("vector (plain)", "chunks", {"retriever": {"kind": "vector"}}),
    Config("bm25", "chunks", {"retriever": {"kind": "bm25"}}),
    Config("hybrid (default)", "chunks"),
    Config("vector + similarity cutoff 0.3", "chunks",
           {"retriever": {"kind": "vector"}, **_stages("similarity_cutoff", similarity_cutoff=0.3)}),
    Config("vector + rerank", "chunks", {"retriever": {"kind": "vector"}, **_stages("rerank", rerank="lexical")}),
    Config("hybrid + rerank", "chunks", _stages("rerank", rerank="lexical")),
    Config("hybrid + rerank + reorder", "chunks", _stages("rerank", "reorder", rerank="lexical")),
    Config("hybrid + optimizer", "chunks", _stages("optimizer")),
    Config("sentence windows: hybrid", "windows", _stages("sentence_window")),
    Config("sentence windows: hybrid + rerank", "windows", _stages("rerank", "sentence_window", rerank="lexical")),
    Config("document summaries", "chunks", {"retriever": {"kind": "summary", "summary_choice": "embedding", "summary_documents": TOP}}),
    Config("agentic chunks: hybrid", "agentic"),
    Config("agentic chunks: hybrid + rerank", "agentic", _stages("rerank", rerank="lexical")),
]

INDEXES = {
    "chunks": {"summaries": True},
    "windows": {"chunker": "sentence_window"},
    "agentic": {"chunker": "agentic"},
}


@dataclass
class Scores:
    recall: float
    mrr: float
    answer: float
    ms: float


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _answer_in(chunks: list, answers: list[str]) -> bool:
    context = _normalise(" ".join(c.node.get_content() for c in chunks))
    return any(_normalise(a) and _normalise(a) in context for a in answers)


async def _chunks_for(workflow: Any, query: str) -> list:
    chunks = await workflow.retriever.retrieve(query)
    for stage in workflow.postprocessors:
        chunks = await stage.postprocess(query, chunks)
    return chunks[:TOP]


def _score(workflow: Any, questions: list[dict]) -> tuple[Scores, list[list]]:
    hits = reciprocal = answered = 0.0
    results = []
    started = time.perf_counter()
    for q in questions:
        found = asyncio.run(_chunks_for(workflow, q["question"]))
        results.append(found)
        ids = [c.node.metadata.get("doc_id") for c in found]
        if q["doc_id"] in ids:
            hits += 1
            reciprocal += 1.0 / (ids.index(q["doc_id"]) + 1)
        answered += _answer_in(found, q["answers"])
    ms = 1000 * (time.perf_counter() - started) / len(questions)
    n = len(questions)
    return Scores(100 * hits / n, reciprocal / n, 100 * answered / n, ms), results


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Probability that a random positive outscores a random negative (ties count half)."""
    pos, neg = scores[labels], scores[~labels]
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def _grader_line(index: ChunkIndex, questions: list[dict], top5: list[list]) -> str:
    evaluator = LexicalEvaluator(index.term_stats)
    labels, scores = [], []
    for q, found in zip(questions, top5):
        labels.extend(c.node.metadata.get("doc_id") == q["doc_id"] for c in found)
        scores.extend(g.score for g in asyncio.run(evaluator.grade(q["question"], found)))
    y, s = np.array(labels), np.array(scores)
    threshold = thresholds_of(evaluator)[0]
    predicted = s >= threshold
    balanced = 0.5 * (predicted[y].mean() + (~predicted[~y]).mean())
    return (
        f"  grader on top-5 pairs: ROC AUC {roc_auc(y, s):.3f}; at upper={threshold:.3f}: accuracy "
        f"{(predicted == y).mean():.3f}, balanced accuracy {balanced:.3f} "
        f"(always 'irrelevant': accuracy {(~y).mean():.3f}, balanced 0.500)"
    )


def evaluate(data: Path, name: str, configs: list[Config]) -> dict[str, Scores]:
    questions = [json.loads(line) for line in (data / f"{name}-dev.jsonl").read_text().splitlines()]
    corpus = data / f"{name}-dev-corpus.jsonl"
    table: dict[str, Scores] = {}
    with tempfile.TemporaryDirectory() as tmp:
        indexes: dict[str, ChunkIndex] = {}
        for kind in sorted({c.index for c in configs}):
            settings = Settings.load(env={}, index={"path": Path(tmp) / kind, **INDEXES[kind]})
            summarize = None
            if settings.index.summaries:
                from crag.ingestion.configured import summarizer_for

                summarize = summarizer_for(settings)
            parser, chunker = node_parser_for(settings)
            started = time.perf_counter()
            ingest([corpus], settings.index.path, node_parser=parser, chunker=chunker, summarize=summarize)
            indexes[kind] = ChunkIndex.load(settings.index.path)
            print(f"  [{name}] {kind}: {len(indexes[kind])} chunks in {time.perf_counter() - started:.1f} s",
                  file=sys.stderr)
        print(f"\n{name}-dev: {len(questions)} questions, {len(indexes.get('chunks', []))} chunks")
        print(f"  {'configuration':<36} recall@5    MRR  answer-in-context  ms/query")
        for config in configs:
            settings = Settings.load(env={}, **config.settings)
            workflow = build_workflow(settings, index=indexes[config.index])
            scores, results = _score(workflow, questions)
            table[config.name] = scores
            print(f"  {config.name:<36} {scores.recall:8.1f} {scores.mrr:6.3f} {scores.answer:18.1f} {scores.ms:9.1f}")
            if config.name == "hybrid (default)":
                print(_grader_line(indexes["chunks"], questions, results))
    return table


def plot(tables: dict[str, dict[str, Scores]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(next(iter(tables.values())))
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(names) * len(tables) + 1.5))
    height = 0.8 / len(tables)
    for i, (dataset, table) in enumerate(tables.items()):
        y = np.arange(len(names)) + i * height
        values = [table[n].recall for n in names]
        bars = ax.barh(y, values, height=height, label=f"{dataset}-dev")
        ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=2)
    ax.set_yticks(np.arange(len(names)) + height * (len(tables) - 1) / 2, names)
    ax.invert_yaxis()
    ax.set_xlabel("recall@5 of the gold passage (%)")
    ax.set_xlim(0, 105)
    ax.set_title("crag retrieval stages, offline (WordLlama + BM25 + lexical scoring)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"\nwrote {out}")


def main() -> None:
    cli = _harness.parser(__doc__)
    cli.add_argument("--data", type=Path, default=_harness.DATA)
    cli.add_argument("--sets", default="squad,popqa,hotpotqa")
    cli.add_argument("--configs", default="all", help="'all' or comma-separated configuration names")
    cli.add_argument("--png", type=Path, default=Path("docs/retrieval.png"))
    args = _harness.parse(cli, smoke={"sets": "squad", "png": None})
    configs = CONFIGS if args.configs == "all" else [c for c in CONFIGS if c.name in args.configs.split(",")]
    with _harness.measured(__file__, args) as run:
        tables = {name: evaluate(args.data, name, configs) for name in args.sets.split(",")}
        run.figures = {name: {config: vars(scores) for config, scores in table.items()}
                       for name, table in tables.items()}
        baseline = "vector (plain)"
        if all(baseline in t for t in tables.values()):
            # One configuration for every set (the best on average), not the best per set.
            best = max(configs, key=lambda c: np.mean([t[c.name].recall for t in tables.values()])).name
            gains = {d: t[best].recall - t[baseline].recall for d, t in tables.items()}
            print(f"\nbest offline configuration on average: {best}; recall@5 vs plain vector:")
            for dataset, gain in gains.items():
                print(f"  {dataset}: {tables[dataset][best].recall:.1f} vs {tables[dataset][baseline].recall:.1f} "
                      f"({gain:+.1f})")
            run.goal(f"sets where {best} gains >= 10 points recall@5 over plain vector",
                     sum(g >= 10 for g in gains.values()), at_least=2)
        if args.png:
            plot(tables, args.png)
        else:  # at smoke size: drawn, so the drawing runs too, and not kept
            with tempfile.TemporaryDirectory() as tmp:
                plot(tables, Path(tmp) / "retrieval.png")

if __name__ == "__main__":
    main()
