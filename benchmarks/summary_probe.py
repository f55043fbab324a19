"""Document-summary retrieval against plain vector retrieval on the shared dev sets, offline.

    python benchmarks/summary_probe.py [--data ../shared/data] [--sets squad,popqa,hotpotqa]

For each set the corpus is ingested once with extractive summaries (`crag ingest
--summaries`), and the time the summarizer takes is reported apart from the ingest. Then,
per question, the gold passage's rank among the documents each retriever returns:

    vector      crag's plain vector retriever: the 5 best chunks (their documents, deduplicated)
    summary     SummaryRetriever, embedding choice (default: BM25 + WordLlama over the
                summaries, fused as the hybrid chunk retriever fuses), 5 documents
    summary, embedding only / BM25 + embedding x1.0: the ranking variants of the same summaries

recall@5 / MRR of the gold passage, and recall@2 (the default `summary_documents`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from crag import ChunkIndex, ingest  # noqa: E402
from crag.ingestion.readers import read_documents  # noqa: E402
from crag.ingestion.summaries import ExtractiveSummarizer  # noqa: E402
from crag.models import WordLlamaEmbedding  # noqa: E402
from crag.steps.document_summaries import SummaryRetriever  # noqa: E402
from crag.steps.retrieval import HybridRetriever  # noqa: E402


def _ranks(found: list[list[str]], gold: list[str]) -> dict[str, float]:
    ranks = [docs.index(g) + 1 if g in docs else None for docs, g in zip(found, gold)]
    n = len(gold)
    return {
        "recall@2": 100 * sum(r is not None and r <= 2 for r in ranks) / n,
        "recall@5": 100 * sum(r is not None and r <= 5 for r in ranks) / n,
        "mrr": sum(1 / r for r in ranks if r is not None and r <= 5) / n,
    }


def _unique(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def probe(data: Path, name: str) -> None:
    questions = [json.loads(line) for line in (data / f"{name}-dev.jsonl").read_text().splitlines()]
    corpus = data / f"{name}-dev-corpus.jsonl"
    documents = list(read_documents(corpus))
    started = time.perf_counter()
    ExtractiveSummarizer()(documents)
    summarize_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        ingest([corpus], Path(tmp) / "index", summarize=ExtractiveSummarizer())
        ingest_s = time.perf_counter() - started
        index = ChunkIndex.load(Path(tmp) / "index")
    embed = WordLlamaEmbedding()
    vector = HybridRetriever(index, embed, top_k=5, mode="vector")
    summary = SummaryRetriever(index, embed, documents=5)
    gold = [q["doc_id"] for q in questions]

    def run(retriever: object) -> list[list[str]]:
        return [
            _unique([c.node.ref_doc_id for c in asyncio.run(retriever.retrieve(q["question"]))])[:5]
            for q in questions
        ]

    rows = {
        "vector (plain, chunks)": run(vector),
        "summary, embedding only": run(SummaryRetriever(index, embed, documents=5, vector_weight=None)),
        "summary, BM25 + embedding x1.0": run(SummaryRetriever(index, embed, documents=5, vector_weight=1.0)),
        "summary, BM25 + embedding x0.2 (default)": run(summary),
    }
    print(f"\n{name}-dev: {len(questions)} questions, {len(documents)} documents, {len(index)} chunks; "
          f"summaries {summarize_s:.2f} s ({1000 * summarize_s / len(documents):.2f} ms/document), "
          f"ingest with summaries {ingest_s:.1f} s")
    print(f"  {'retriever':<42} recall@2 recall@5    MRR")
    for label, found in rows.items():
        r = _ranks(found, gold)
        print(f"  {label:<42} {r['recall@2']:8.1f} {r['recall@5']:8.1f} {r['mrr']:6.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--sets", default="squad,popqa,hotpotqa")
    args = parser.parse_args()
    for name in args.sets.split(","):
        probe(args.data, name)


if __name__ == "__main__":
    main()
