"""The `crag` command: ingest, ask, draw, demo."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Any

from workflows.errors import WorkflowTimeoutError

from crag.config import Settings
from crag.errors import CragError
from crag.events import CragResult


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 ok, 2 for a clear error, 130 on Ctrl-C)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # crag never fetches models at run time
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except CragError as exc:
        print(f"crag: error: {exc}", file=sys.stderr)
        return 2
    except WorkflowTimeoutError as exc:
        print(f"crag: error: the run was cancelled: {exc} (raise [run] timeout)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("crag: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug: say so in one line unless asked for more
        if os.environ.get("CRAG_DEBUG"):
            raise
        print(f"crag: internal error: {type(exc).__name__}: {exc} (CRAG_DEBUG=1 shows where)", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crag", description="Corrective RAG over your documents.")
    parser.add_argument("--config", type=Path, help="settings file (default: ./crag.toml if present)")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    p = sub.add_parser("ingest", help="index documents (.txt .md .html .jsonl)")
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--index", type=Path, help="index folder (default .crag/index)")
    p.add_argument("--chunk-size", type=int)
    p.set_defaults(func=_ingest)

    p = sub.add_parser("ask", help="answer a question from the index, correcting with web search")
    p.add_argument("question")
    p.add_argument("--index", type=Path)
    p.add_argument("--web-corpus", type=Path, help="folder or .jsonl searched as the web (offline)")
    p.add_argument("--upper", type=float, help="grade at or above which retrieval is Correct")
    p.add_argument("--lower", type=float, help="grade below which (for all chunks) it is Incorrect")
    p.add_argument("--top-k", type=int)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_ask)

    p = sub.add_parser("draw", help="draw every possible flow of the workflow")
    p.add_argument("--out", type=Path, default=Path("crag-graph.html"))
    p.add_argument("--format", choices=["html", "mermaid"], default="html")
    p.set_defaults(func=_draw)

    p = sub.add_parser("demo", help="ingest the bundled sample documents and ask two questions")
    p.set_defaults(func=_demo)
    return parser


def _settings(args: argparse.Namespace, **overrides: dict[str, Any]) -> Settings:
    index = {"path": getattr(args, "index", None), "chunk_size": getattr(args, "chunk_size", None)}
    return Settings.load(args.config, index=index, **overrides)


def _ingest(args: argparse.Namespace) -> int:
    from crag.index import ingest

    settings = _settings(args)
    report = ingest(
        args.paths,
        settings.index.path,
        chunk_size=settings.index.chunk_size,
        chunk_overlap=settings.index.chunk_overlap,
        progress=_print_progress if sys.stderr.isatty() else None,
    )
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(
        f"{report.files_read} file(s) read, {report.files_unchanged} unchanged, "
        f"{report.chunks_added} chunk(s) added; {report.chunks_total} chunk(s) in {settings.index.path}"
    )
    return 0


def _print_progress(stage: str, done: int, total: int) -> None:
    print(f"\r{stage}: {done}/{total}", end="", file=sys.stderr, flush=True)


def _ask(args: argparse.Namespace) -> int:
    from crag.factory import build_workflow

    settings = _settings(
        args,
        web_search={"corpus": args.web_corpus},
        grader={"upper": args.upper, "lower": args.lower},
        retriever={"top_k": args.top_k},
    )
    result = build_workflow(settings).ask(args.question)
    print(json.dumps(result.model_dump(mode="json"), ensure_ascii=False) if args.json else _format(result))
    return 0


def _format(result: CragResult) -> str:
    lines = [result.answer, "", f"verdict: {result.verdict.value}"]
    if result.rewritten_query:
        lines.append(f"web query: {result.rewritten_query}")
    lines.append("grades: " + ", ".join(f"{g.score:.2f}" for g in result.grades))
    if result.sources:
        lines.append("sources:")
        for s in result.sources:
            where = s.url or s.title or s.id
            lines.append(f"  [{s.number}] {s.kind}: {where}")
    return "\n".join(lines)


def _draw(args: argparse.Namespace) -> int:
    from crag.render import graph_html, mermaid
    from crag.workflows import CorrectiveRAGWorkflow

    text = mermaid(CorrectiveRAGWorkflow) if args.format == "mermaid" else graph_html(CorrectiveRAGWorkflow)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


DEMO_QUESTIONS = (
    "What warranty does Lumen give on the Helio H10?",  # the handbook answers this
    "Who invented the lithium-ion battery?",  # it does not: the web search must
)


def _demo(args: argparse.Namespace) -> int:
    from crag.factory import build_workflow
    from crag.index import ingest

    samples = files("crag") / "sample_data"
    with tempfile.TemporaryDirectory() as tmp:
        index_dir = Path(tmp) / "index"
        report = ingest([Path(str(samples / "docs"))], index_dir)
        print(f"Indexed {report.chunks_total} chunks of the sample handbook ({samples / 'docs'}).\n")
        settings = Settings.load(
            args.config, index={"path": index_dir}, web_search={"corpus": Path(str(samples / "web.jsonl"))}
        )
        workflow = build_workflow(settings)
        for question in DEMO_QUESTIONS:
            print(f"Q: {question}\n{_format(workflow.ask(question))}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
