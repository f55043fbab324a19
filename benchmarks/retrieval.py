"""Recall@5 and MRR of the gold passage per retriever, and the offline grader's quality.

    python benchmarks/retrieval.py [--data ../shared/data] [--sets squad,popqa,hotpotqa]

For each set, the corpus is ingested into a temporary index; every question is asked of each
retriever. The grader is judged on the top-5 chunks of the default retriever: is each chunk
the gold passage? Labels are imbalanced (about 1 in 5), so balanced accuracy and ROC AUC are
printed beside accuracy, with the always-"irrelevant" baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from crag import ChunkIndex, ingest  # noqa: E402
from crag.config import GraderSettings  # noqa: E402
from crag.steps.grading import LexicalEvaluator  # noqa: E402
from crag.steps.retrieval import HybridRetriever  # noqa: E402

RETRIEVERS = {
    "vector (WordLlama)": dict(mode="vector"),
    "bm25": dict(mode="bm25"),
    "hybrid, equal RRF": dict(mode="hybrid", vector_weight=1.0),
    "hybrid (default)": dict(mode="hybrid"),
}


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Probability that a random positive outscores a random negative (ties count half)."""
    pos, neg = scores[labels], scores[~labels]
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def evaluate(data: Path, name: str) -> None:
    questions = [json.loads(line) for line in (data / f"{name}-dev.jsonl").read_text().splitlines()]
    with tempfile.TemporaryDirectory() as tmp:
        ingest([data / f"{name}-dev-corpus.jsonl"], Path(tmp) / "index")
        index = ChunkIndex.load(Path(tmp) / "index")
    print(f"\n{name}-dev: {len(questions)} questions, {len(index)} chunks")
    print(f"  {'retriever':<22} recall@5    MRR")
    top5: list[list] = []
    for label, options in RETRIEVERS.items():
        retriever = HybridRetriever(index, top_k=5, **options)
        hits, reciprocal = 0, 0.0
        results = [asyncio.run(retriever.retrieve(q["question"])) for q in questions]
        for q, found in zip(questions, results):
            ids = [n.node.metadata["doc_id"] for n in found]
            if q["doc_id"] in ids:
                hits += 1
                reciprocal += 1.0 / (ids.index(q["doc_id"]) + 1)
        print(f"  {label:<22} {100 * hits / len(questions):8.1f} {reciprocal / len(questions):6.3f}")
        if "default" in label:
            top5 = results
    evaluator = LexicalEvaluator(index.term_stats)
    labels, scores = [], []
    for q, found in zip(questions, top5):
        labels.extend(n.node.metadata["doc_id"] == q["doc_id"] for n in found)
        scores.extend(g.score for g in asyncio.run(evaluator.grade(q["question"], found)))
    y, s = np.array(labels), np.array(scores)
    threshold = GraderSettings().upper
    predicted = s >= threshold
    balanced = 0.5 * (predicted[y].mean() + (~predicted[~y]).mean())
    print(
        f"  grader on top-5 pairs: ROC AUC {roc_auc(y, s):.3f}; at upper={threshold}: accuracy "
        f"{(predicted == y).mean():.3f}, balanced accuracy {balanced:.3f} "
        f"(always 'irrelevant': accuracy {(~y).mean():.3f}, balanced 0.500)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--sets", default="squad,popqa,hotpotqa")
    args = parser.parse_args()
    for name in args.sets.split(","):
        evaluate(args.data, name)


if __name__ == "__main__":
    main()
