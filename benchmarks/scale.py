"""Ingest and retrieval at 1k, 10k and 100k chunks: crag's store against SimpleVectorStore.

    python benchmarks/scale.py [--sizes 1000,10000,100000] [--queries 200] [--data ../shared/data]
                               [--skip-simple] [--smoke]

Corpora are made from the shared *-corpus.jsonl passages: every sentence, shuffled with a
fixed seed, dealt into documents of four sentences (one chunk each at crag's default chunk
size). crag ingests them with `crag.ingest` (read, chunk, embed, analyze, write BM25 and
IDF statistics), then opens the index, all counted in "ingest chunks/s". crag searches its
vectors exactly over the memory-mapped embeddings (the default store). LlamaIndex
gets the same chunks and the same WordLlama model in a `VectorStoreIndex` over a
`SimpleVectorStore`, persisted to disk. Retrieval is the vector top-5 of dev-set questions
(query embedding included, for both); "hybrid p95" is crag's whole retriever (BM25 + vectors).

Each corpus is one .jsonl file, about 0.6 MB per 1,000 chunks (60 MB at 100k), ingested with the
default `[ingest]` limits: a corpus is read a record at a time, each record held to one
document's limits (`crag.ingestion.formats.records`).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import _harness
import numpy as np

from crag.text import sentences

if TYPE_CHECKING:
    from crag.models import WordLlamaEmbedding

# The rest of crag is imported where it is used: cold_start.py and event_loop.py make their
# corpora with `make_corpus`, and a process that only makes one need not load llama-index.

SETS = ("squad", "popqa", "hotpotqa")
SENTENCES_PER_DOC = 4


def make_corpus(data: Path, chunks: int, out: Path, seed: int = 0) -> None:
    pool = []
    for name in SETS:
        with open(data / f"{name}-dev-corpus.jsonl", encoding="utf-8") as f:
            pool.extend(s for line in f for s in sentences(json.loads(line)["text"]))
    rng = random.Random(seed)
    with open(out, "w", encoding="utf-8") as f:
        for i in range(chunks):
            text = " ".join(rng.choice(pool) for _ in range(SENTENCES_PER_DOC))
            f.write(json.dumps({"doc_id": f"d{i}", "title": f"Doc {i}", "text": text}) + "\n")


def questions(data: Path, count: int) -> list[str]:
    found = []
    for name in SETS:
        with open(data / f"{name}-dev.jsonl", encoding="utf-8") as f:
            found.extend(json.loads(line)["question"] for line in f)
    return random.Random(1).sample(found, min(count, len(found)))


def size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def percentiles(seconds: list[float]) -> tuple[float, float]:
    ms = np.array(seconds) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def timed(fn, items) -> list[float]:
    out = []
    for item in items:
        start = time.perf_counter()
        fn(item)
        out.append(time.perf_counter() - start)
    return out


def run_crag(corpus: Path, folder: Path, model: WordLlamaEmbedding, queries: list[str]) -> dict:
    from crag.index import ChunkIndex
    from crag.ingestion import ingest
    from crag.steps.retrieval import HybridRetriever

    start = time.perf_counter()
    ingest([corpus], folder, embed_model=model)  # the default limits
    index = ChunkIndex.load(folder)
    index.warm_up()  # what every workflow does when it is built
    seconds = time.perf_counter() - start
    vector = timed(lambda q: index.vector_search(model.embed_many([q])[0], 5), queries)
    hybrid = HybridRetriever(index, model)
    full = timed(lambda q: asyncio.run(hybrid.retrieve(q)), queries)
    index.close()
    return {"chunks": len(index), "rate": len(index) / seconds, "mb": size_mb(folder),
            "p": percentiles(vector), "hybrid_p95": percentiles(full)[1]}


def run_simple(folder: Path, crag_index: Path, model: WordLlamaEmbedding, queries: list[str]) -> dict:
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.vector_stores import SimpleVectorStore

    from crag.index import ChunkIndex

    nodes = list(ChunkIndex.load(crag_index).nodes)  # the very chunks crag made; reading them is not timed
    for node in nodes:
        node.embedding = None
    start = time.perf_counter()
    storage = StorageContext.from_defaults(vector_store=SimpleVectorStore())
    index = VectorStoreIndex(nodes, storage_context=storage, embed_model=model, insert_batch_size=4096)
    index.storage_context.persist(str(folder))
    seconds = time.perf_counter() - start
    retriever = index.as_retriever(similarity_top_k=5)
    latency = timed(retriever.retrieve, queries)
    return {"rate": len(nodes) / seconds, "mb": size_mb(folder), "p": percentiles(latency)}


def main() -> int:
    cli = _harness.parser(__doc__)
    cli.add_argument("--sizes", default="1000,10000,100000")
    cli.add_argument("--queries", type=int, default=200)
    cli.add_argument("--data", type=Path, default=_harness.DATA)
    cli.add_argument("--skip-simple", action="store_true", help="crag only")
    args = _harness.parse(cli, smoke={"sizes": "200", "queries": 5})
    with _harness.measured(__file__, args) as run:
        from crag.models import WordLlamaEmbedding

        model = WordLlamaEmbedding()
        queries = questions(args.data, args.queries)
        print("| chunks | system | ingest chunks/s | disk MB | vector p50 ms | vector p95 ms | hybrid p95 ms "
              "| p95 crag/simple |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|")
        rows = []
        for size in (int(s) for s in args.sizes.split(",")):
            with tempfile.TemporaryDirectory(prefix="crag-scale-") as tmp:
                root = Path(tmp)
                make_corpus(args.data, size, root / "corpus.jsonl")
                crag = run_crag(root / "corpus.jsonl", root / "crag", model, queries)
                simple = None if args.skip_simple else run_simple(root / "simple", root / "crag", model, queries)
                ratio = crag["p"][1] / simple["p"][1] if simple else math.nan
                print(f"| {crag['chunks']:,} | crag (exact, memory-mapped) | {crag['rate']:,.0f} | {crag['mb']:.1f} | "
                      f"{crag['p'][0]:.2f} | {crag['p'][1]:.2f} | {crag['hybrid_p95']:.2f} | {ratio:.3f} |")
                if simple:
                    print(f"| {crag['chunks']:,} | SimpleVectorStore | {simple['rate']:,.0f} | {simple['mb']:.1f} | "
                          f"{simple['p'][0]:.2f} | {simple['p'][1]:.2f} | | |")
                sys.stdout.flush()
                rows.append({"chunks": crag["chunks"], "crag": crag, "simple": simple, "p95_ratio": ratio})
        run.figures["sizes"] = rows
        largest = max(rows, key=lambda r: r["chunks"])
        run.goal("ingest chunks/s, lowest", min(r["crag"]["rate"] for r in rows), at_least=500)
        run.goal(f"vector p95 at {largest['chunks']:,} chunks, ms", largest["crag"]["p"][1], at_most=50)
        if args.skip_simple:
            run.skip("SimpleVectorStore", "--skip-simple")
        else:
            run.goal("vector p95 over SimpleVectorStore's", largest["p95_ratio"], at_most=0.1)
    return 0

if __name__ == "__main__":
    sys.exit(main())
