"""Which offline rerank scoring: hybrid top-40 -> rerank -> top-5, on the shared dev sets.

    python benchmarks/rerank_probe.py [--data ../shared/data] [--sets squad,popqa,hotpotqa]
                                      [--depth 40] [--top 5]

For each set the corpus is ingested with default settings into a temporary index; every
question's `depth` hybrid candidates get three signals (the lexical evaluator's score,
WordLlama cosine, first-stage rank), and every weighting on a small grid is scored by
recall@top and MRR of the gold passage (by doc id), beside plain hybrid top-`top`.
The weights are then chosen leaving each set out in turn (best mean recall on the other
two), so the held-out figure shows whether the choice carries over. The last row runs the
shipped `LexicalReranker` itself.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from crag import ChunkIndex, ingest  # noqa: E402
from crag.models import WordLlamaEmbedding  # noqa: E402
from crag.steps.grading import LexicalEvaluator  # noqa: E402
from crag.steps.reranking import LexicalReranker  # noqa: E402
from crag.steps.retrieval import HybridRetriever  # noqa: E402

COSINE = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)
RANK = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8)


def _metrics(gold: list[np.ndarray], scores: list[np.ndarray], top: int) -> tuple[float, float]:
    """Recall@top (%) and MRR of the gold passage; ties keep first-stage order."""
    hits = reciprocal = 0.0
    for is_gold, s in zip(gold, scores):
        order = np.argsort(-s, kind="stable")[:top]
        ranks = np.flatnonzero(is_gold[order])
        if ranks.size:
            hits += 1
            reciprocal += 1.0 / (ranks[0] + 1)
    return 100 * hits / len(gold), reciprocal / len(gold)


def features(data: Path, name: str, depth: int, embed: WordLlamaEmbedding, tmp: Path):
    questions = [json.loads(line) for line in (data / f"{name}-dev.jsonl").read_text().splitlines()]
    ingest([data / f"{name}-dev-corpus.jsonl"], tmp / name, embed_model=embed)
    index = ChunkIndex.load(tmp / name)
    retriever = HybridRetriever(index, embed, top_k=depth)
    evaluator = LexicalEvaluator(index.term_stats)
    rows = []
    for q in questions:
        chunks = asyncio.run(retriever.retrieve(q["question"]))
        lexical = np.array([g.score for g in asyncio.run(evaluator.grade(q["question"], chunks))])
        vectors = embed.embed_many([q["question"]] + [c.node.get_content() for c in chunks])
        cosine = np.clip(vectors[1:] @ vectors[0], 0.0, 1.0)
        gold = np.array([c.node.metadata.get("doc_id") == q["doc_id"] for c in chunks])
        rows.append((q["question"], chunks, gold, lexical, cosine, q["doc_id"]))
    return index, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--sets", default="squad,popqa,hotpotqa")
    parser.add_argument("--depth", type=int, default=40)
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    embed = WordLlamaEmbedding()
    sets = args.sets.split(",")
    grid = list(itertools.product(COSINE, RANK))
    table: dict[str, dict[tuple[float, float], tuple[float, float]]] = {}
    baseline: dict[str, tuple[float, float]] = {}
    shipped: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in sets:
            started = time.perf_counter()
            index, rows = features(args.data, name, args.depth, embed, Path(tmp))
            gold = [r[2] for r in rows]
            ranks = [np.arange(len(r[2]), dtype=float) for r in rows]
            baseline[name] = _metrics(gold, [-rank for rank in ranks], args.top)
            table[name] = {
                (c, k): _metrics(gold, [lex + c * cos + k / (1 + rank) for (_, _, _, lex, cos, _), rank in zip(rows, ranks)], args.top)
                for c, k in grid
            }
            reranker = LexicalReranker(LexicalEvaluator(index.term_stats), embed, args.top)
            kept = [asyncio.run(reranker.postprocess(q, chunks)) for q, chunks, *_ in rows]
            shipped_gold = [np.array([c.node.metadata.get("doc_id") == row[5] for c in k]) for k, row in zip(kept, rows)]
            shipped[name] = _metrics(shipped_gold, [-np.arange(len(g), dtype=float) for g in shipped_gold], args.top)
            print(f"  [{name}] {len(rows)} questions in {time.perf_counter() - started:.1f} s", file=sys.stderr)

    def mean_recall(weights: tuple[float, float], names: list[str]) -> float:
        return float(np.mean([table[n][weights][0] + 10 * table[n][weights][1] for n in names]))

    print(f"\nhybrid top-{args.depth} -> rerank -> top-{args.top}: recall@{args.top} / MRR of the gold passage")
    header = "  ".join(f"{n + '-dev':>16}" for n in sets)
    print(f"{'scoring':<44}{header}")

    def line(label: str, values: dict[str, tuple[float, float]]) -> None:
        print(f"{label:<44}" + "  ".join(f"{values[n][0]:8.1f} / {values[n][1]:.3f}" for n in sets))

    line(f"hybrid top-{args.top} (no rerank)", baseline)
    for c, k in [(0.0, 0.0), *sorted(grid, key=lambda w: -mean_recall(w, sets))[:8]]:
        line(f"lexical + {c} cosine + {k} rank", {n: table[n][(c, k)] for n in sets})
    line(f"shipped LexicalReranker ({reranker.cosine_weight} cosine, {reranker.rank_weight} rank)", shipped)
    if len(sets) > 1:
        print("\nleave one set out (weights: best recall + 10 x MRR on the other sets):")
        for held in sets:
            rest = [n for n in sets if n != held]
            best = max(grid, key=lambda w: mean_recall(w, rest))
            r, m = table[held][best]
            print(f"  {held}-dev: cosine {best[0]}, rank {best[1]} -> {r:.1f} / {m:.3f} "
                  f"(no rerank {baseline[held][0]:.1f} / {baseline[held][1]:.3f})")


if __name__ == "__main__":
    main()
