"""Agentic chunking, offline: retrieval recall@5 of the gold passage, with and without pronoun
resolution, against the default sentence chunker; and chunking speed.

    python benchmarks/agentic_probe.py [--data ../shared/data] [--sets squad] [--thresholds 0.2,0.3]

Each corpus is ingested whole, once per chunker, into a temporary index; every question is asked
of the default (hybrid) retriever, and a hit is a top-5 chunk cut from the gold passage's
document (an agentic chunk belongs to exactly one document). "chunks/s" counts the chunks the
node parser produced per second of parsing (propositions, embedding for grouping, titles),
not the ingest's own embedding and saving.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path
from time import perf_counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from llama_index.core.node_parser import NodeParser, SentenceSplitter  # noqa: E402
from llama_index.core.schema import Document  # noqa: E402

from crag import ChunkIndex, ingest  # noqa: E402
from crag.ingestion.chunkers.agentic import AgenticChunker  # noqa: E402
from crag.steps.retrieval import HybridRetriever  # noqa: E402


class Timed(NodeParser):
    """Wraps a parser, keeping the seconds it spent and the chunks it made."""

    inner: NodeParser
    seconds: float = 0.0
    chunks: int = 0

    def _parse_nodes(self, nodes, show_progress=False, **kwargs):  # noqa: ANN001, ANN202
        started = perf_counter()
        out = self.inner._parse_nodes(nodes)
        self.seconds += perf_counter() - started
        self.chunks += len(out)
        return out


def recall_at_5(data: Path, name: str, parser: NodeParser) -> tuple[float, Timed]:
    questions = [json.loads(line) for line in (data / f"{name}-dev.jsonl").read_text().splitlines()]
    parser.get_nodes_from_documents([Document(text="Warm up. Load the models first.")])  # not timed
    timed = Timed(inner=parser)
    with tempfile.TemporaryDirectory() as tmp:
        ingest([data / f"{name}-dev-corpus.jsonl"], Path(tmp) / "index", node_parser=timed, chunker="probe")
        index = ChunkIndex.load(Path(tmp) / "index")
    retriever = HybridRetriever(index, top_k=5)
    hits = 0
    for q in questions:
        found = asyncio.run(retriever.retrieve(q["question"]))
        hits += q["doc_id"] in {n.node.metadata["doc_id"] for n in found}
    return 100 * hits / len(questions), timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--sets", default="squad")
    parser.add_argument("--thresholds", default="0.2,0.3")
    args = parser.parse_args()
    for name in args.sets.split(","):
        chunkers: dict[str, NodeParser] = {"sentence 256/32 (default)": SentenceSplitter(chunk_size=256, chunk_overlap=32)}
        for t in map(float, args.thresholds.split(",")):
            chunkers[f"agentic {t}, plain"] = AgenticChunker(threshold=t, resolve_pronouns=False)
            chunkers[f"agentic {t}, pronouns"] = AgenticChunker(threshold=t, resolve_pronouns=True)
        print(f"\n{name}-dev")
        print(f"  {'chunker':<28} recall@5  chunks  chunks/s")
        for label, chunker in chunkers.items():
            recall, timed = recall_at_5(args.data, name, chunker)
            rate = timed.chunks / timed.seconds if timed.seconds else float("inf")
            print(f"  {label:<28} {recall:8.1f} {timed.chunks:7d} {rate:9,.0f}", flush=True)


if __name__ == "__main__":
    main()
