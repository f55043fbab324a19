"""`crag demo`: ingest the bundled sample documents and ask two questions; or `--export` them,
to try the other commands on."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from crag.app.cli.common import format_result

DEMO_QUESTIONS = (
    "What warranty does Lumen give on the Helio H10?",  # the handbook answers this
    "Who invented the lithium-ion battery?",  # it does not: the web search must
)


def add(sub: Any) -> None:
    p = sub.add_parser("demo", help="ingest the bundled sample documents and ask two questions")
    p.add_argument("--export", type=Path, metavar="DIR",
                   help="instead, copy the sample documents (DIR/docs, DIR/datasheet.pdf) and the "
                   "stand-in web (DIR/web.jsonl) to a new folder DIR, to try the other commands on")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import tempfile
    from importlib.resources import files

    from crag.app.cli.ask import ask_through
    from crag.app.runs import RunService
    from crag.config import Settings
    from crag.ingestion import ingest
    from crag.workflows.factory import build_workflow

    samples = files("crag") / "sample_data"
    if args.export is not None:
        return export_samples(Path(str(samples)), args.export)
    with tempfile.TemporaryDirectory() as tmp:
        index_dir = Path(tmp) / "index"
        report = ingest([Path(str(samples / "docs"))], index_dir)
        print(f"Indexed {report.chunks_total} chunks of the sample handbook ({samples / 'docs'}).\n")
        settings = Settings.load(
            args.config, index={"path": index_dir}, web_search={"corpus": Path(str(samples / "web.jsonl"))}
        )
        runs = RunService.in_process(build_workflow(settings))  # as `crag ask` asks
        for question in DEMO_QUESTIONS:
            print(f"Q: {question}\n{format_result(asyncio.run(ask_through(runs, question)))}\n")
    return 0


def export_samples(samples: Path, out: Path) -> int:
    """Copy the sample documents, the datasheet and the stand-in web to a new folder `out`."""
    import shutil

    from crag.errors import ConfigError

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} already exists and is not an empty folder; give a new folder to --export.")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(samples / "docs", out / "docs")
    shutil.copy2(samples / "web.jsonl", out / "web.jsonl")
    shutil.copy2(samples / "datasheet.pdf", out / "datasheet.pdf")  # the README's PDF step
    names = sorted(p.name for p in (out / "docs").iterdir())
    print(f"copied {len(names)} handbook pages to {out / 'docs'} ({', '.join(names)}), "
          f"a datasheet to {out / 'datasheet.pdf'} and the stand-in web to {out / 'web.jsonl'}\n"
          f"next: crag ingest {out / 'docs'}")
    return 0
