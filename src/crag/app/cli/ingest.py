"""`crag ingest PATHS`: index documents; a file that cannot be read is left out, said in one line."""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from crag.app.cli.common import say, settings_for
from crag.cli_flags import add_collection_flag

PARTIAL = 3
"""`crag ingest`'s exit status when some files were left out and the rest ingested."""


def add(sub: Any) -> None:
    p = sub.add_parser(
        "ingest", help="index documents (.txt .md .html .jsonl .pdf .docx .pptx .ipynb .csv .tsv)",
        description="Index documents. A file that cannot be read is left out with one line saying "
        "why, and the rest are ingested. Exit status: 0 every file ingested (or unchanged), "
        "3 some files left out and the rest ingested, 2 nothing ingested (the index is as it was).",
    )
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--index", type=Path, help="index folder (default .crag/index)")
    p.add_argument("--chunk-size", type=int)
    p.add_argument("--chunker", choices=["sentence", "sentence_window", "agentic"],
                   help="how documents are cut: token-budget chunks (default), one sentence with its "
                   "neighbours, or propositions grouped into titled chunks")
    p.add_argument("--window-size", type=int, help="sentences either side, for --chunker sentence_window")
    p.add_argument("--summaries", action="store_true", default=None,
                   help="write a summary per document (for --retriever summary)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--allow-readers", action="store_true",
                   help="run the readers (code) a ./crag.toml names though it was not given with --config")
    add_collection_flag(p)
    p.set_defaults(func=run, creates_index=True)  # a --collection named is made


def run(args: argparse.Namespace) -> int:
    from crag.app.progress import ingest_progress
    from crag.ingestion.configured import ingest_with_settings

    settings = settings_for(args)
    if args.allow_readers:
        settings.ingest.readers_found_in(None)
    with nullcontext(None) if args.quiet else ingest_progress() as progress:
        report = ingest_with_settings(args.paths, settings, progress)
    for reason in report.skipped:
        say(f"crag: skipped: {reason}")
    for reason in report.empty:
        say(f"crag: empty: {reason}")
    for line in report.not_read:  # said, but not a failure: the exit status stays 0
        say(f"crag: {line}")
    skipped = f", {report.files_skipped} skipped" if report.skipped else ""
    empty = f", {report.files_empty} empty" if report.empty else ""
    print(
        f"{report.files_read} file(s) read, {report.files_unchanged} unchanged{skipped}{empty}, "
        f"{report.chunks_added} chunk(s) added; {report.chunks_total} chunk(s) in {settings.index.path}"
    )
    return PARTIAL if report.skipped or report.empty else 0
