"""Small corpora, written and ingested in the test that reads them."""

from __future__ import annotations

import json
from pathlib import Path

from crag import ingest

# Passages on nothing the multi-hop tests ask about: the corpus they share with the passages
# under test, so that retrieval and IDF have something to tell those apart from.
FILLER = [
    {"doc_id": f"filler-{i}", "title": title, "text": text}
    for i, (title, text) in enumerate([
        ("Harbour", "The harbour of the old town holds fishing boats and a lighthouse."),
        ("Orchard", "Apple orchards cover the hills south of the river."),
        ("Railway", "The railway reached the valley in 1871 and closed in 1962."),
        ("Lighthouse", "The lighthouse was painted red and white in 1920."),
    ])
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """Write `rows` to `path` as JSON lines (a web corpus, or documents to ingest)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def ingested(root: Path, docs: dict[str, str]) -> Path:
    """Write `docs` (file name -> text) under `root`/docs and ingest them into `root`/index."""
    (root / "docs").mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (root / "docs" / name).write_text(text, encoding="utf-8")
    ingest([root / "docs"], root / "index")
    return root / "index"
