"""The `crag` command: ingest, ask, draw, serve, mcp, cache, demo (and eval, calibrate).

Arguments are parsed before anything heavy is imported, so `crag --help` and a wrong flag
answer at once; each command imports what it uses.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crag.cli_flags import add_budget_flags, budget_overrides

if TYPE_CHECKING:
    from crag.config import Settings
    from crag.events import CragResult
    from crag.index.grade_cache import CacheStats
    from crag.trace import RunTrace


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 ok, 2 for a clear error, 3 when `crag ingest`
    left some files out and ingested the rest, 1 for a bug, 130 on Ctrl-C).

    Every error is one line on stderr, with API keys removed (a server's error may echo one).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # crag never fetches models at run time
    if getattr(sys.stdout, "errors", None) == "strict" and hasattr(sys.stdout, "reconfigure"):
        # A path that is not UTF-8 (a lone surrogate in Python) must not fail the printing of
        # a result already saved; under a C locale Python writes such bytes back as they were.
        sys.stdout.reconfigure(errors="backslashreplace")
    args = _parser().parse_args(argv)
    if args.func in (_ask, _mcp, _serve):
        from crag._offload import hold_collection

        # Until the workflow is loaded (`settle_heap`): a fifth of a cold start. These commands
        # own their process, so they tune its collector; `build_workflow` never does.
        hold_collection()
    from workflows.errors import WorkflowTimeoutError

    from crag.errors import CragError

    try:
        return args.func(args)
    except CragError as exc:
        _say(f"crag: error: {exc}")
        return 2
    except WorkflowTimeoutError as exc:
        _say(f"crag: error: the run was cancelled: {exc} (raise [run] timeout)")
        return 2
    except KeyboardInterrupt:
        _say("crag: interrupted")
        return 130
    except BrokenPipeError:  # the reader went away (`crag ask … | head -3`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exiting flushes nowhere
        return 0
    except Exception as exc:  # noqa: BLE001 - a bug: say so in one line unless asked for more
        if os.environ.get("CRAG_DEBUG"):
            raise
        _say(f"crag: internal error: {type(exc).__name__}: {exc} (CRAG_DEBUG=1 shows where)")
        return 1


def _say(message: str) -> None:
    """`message` as one line on stderr, without API keys or control characters (a file name in
    a skip line may hold ESC: `crag.printable`)."""
    from crag.errors import redact
    from crag.printable import printable

    message = message.encode("utf-8", "backslashreplace").decode("utf-8")  # a non-UTF-8 path named
    print(printable(" ".join(redact(message).split()), lines=False), file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crag", description="Corrective RAG over your documents.")
    parser.add_argument("--config", type=Path, help="settings file (default: ./crag.toml if present)")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

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
    p.set_defaults(func=_ingest)

    p = sub.add_parser("ask", help="answer a question from the index, correcting with web search")
    p.add_argument("question")
    p.add_argument("--index", type=Path)
    p.add_argument("--web-corpus", type=Path, help="folder or .jsonl searched as the web (offline)")
    p.add_argument("--upper", type=float,
                   help="grade at or above which retrieval is Correct (default: the grader's own)")
    p.add_argument("--lower", type=float,
                   help="grade below which (for all chunks) it is Incorrect (default: the grader's own)")
    p.add_argument("--top-k", type=int)
    p.add_argument("--retriever", choices=["hybrid", "vector", "bm25", "summary"], help="retriever kind")
    p.add_argument("--postprocess", metavar="STAGES",
                   help="comma-separated stages between retrieve and grade, in order: similarity_cutoff, "
                   "keywords, sentence_window, rerank, optimizer, reorder")
    p.add_argument("--similarity-cutoff", type=float, help="for the similarity_cutoff stage")
    p.add_argument("--require", metavar="WORDS", help="comma-separated keywords a chunk must contain (keywords stage)")
    p.add_argument("--exclude", metavar="WORDS", help="comma-separated keywords that drop a chunk (keywords stage)")
    p.add_argument("--rerank", choices=["auto", "lexical", "llm"], help="reranker for the rerank stage")
    p.add_argument("--rerank-depth", type=int, help="chunks retrieved before the rerank stage keeps --top-k")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--stream", action=argparse.BooleanOptionalAction, default=None,
                   help="print the answer as it is written (default: when stdout is a terminal; never with --json)")
    p.add_argument("--trace", type=Path, metavar="FILE.json",
                   help="save the run's trace (steps, times, events, calls) for `crag draw --trace`")
    p.add_argument("-q", "--quiet", action="store_true", help="no step progress on stderr")
    add_budget_flags(p)
    p.set_defaults(func=_ask)

    p = sub.add_parser("draw", help="draw every possible flow of the workflow, or one run's path")
    p.add_argument("--trace", type=Path, metavar="FILE.json", help="a run saved by `crag ask --trace`")
    p.add_argument("--out", type=Path, help="file to write, - for stdout "
                   "(default crag-graph.html, crag-trace.html with --trace; .mmd for mermaid)")
    p.add_argument("--format", choices=["html", "mermaid"], default="html")
    p.set_defaults(func=_draw)

    p = sub.add_parser("serve", help="serve the workflow over HTTP (llama-agents-server)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8000)")
    p.add_argument("--index", type=Path)
    p.add_argument("--web-corpus", type=Path, help="folder or .jsonl searched as the web (offline)")
    p.add_argument("--store", metavar="FILE|URL",
                   help="where runs are kept: a SQLite file (default: server.db beside the index) "
                   "or a postgresql:// URL shared by several servers")
    add_budget_flags(p)
    p.set_defaults(func=_serve)

    p = sub.add_parser("mcp", help="serve the workflow to MCP clients (Claude Desktop, VS Code) over stdio",
                       description="A Model Context Protocol server on stdin/stdout: tools ask and "
                       "search, the index manifest and run traces as resources. "
                       "Needs crag-workflows[mcp].")
    p.add_argument("--index", type=Path)
    p.add_argument("--web-corpus", type=Path, help="folder or .jsonl searched as the web (offline)")
    p.add_argument("--allow-ingest", action="store_true",
                   help="add the ingest tool, which writes files into the index (off: clients only read)")
    add_budget_flags(p)
    p.set_defaults(func=_mcp)

    p = sub.add_parser("cache", help="the grade cache (beside the index, or in --store URL): stats, or clear it")
    p.add_argument("action", choices=["stats", "clear"])
    p.add_argument("--index", type=Path)
    p.add_argument("--store", metavar="URL",
                   help="the grade cache of `crag serve` on this postgresql:// store instead")
    p.set_defaults(func=_cache)

    p = sub.add_parser("demo", help="ingest the bundled sample documents and ask two questions")
    p.add_argument("--export", type=Path, metavar="DIR",
                   help="instead, copy the sample documents (DIR/docs, DIR/datasheet.pdf) and the "
                   "stand-in web (DIR/web.jsonl) to a new folder DIR, to try the other commands on")
    p.set_defaults(func=_demo)

    from crag.evaluation.cli import add_evaluation_commands

    add_evaluation_commands(sub)
    return parser


def _settings(args: argparse.Namespace, **overrides: dict[str, Any]) -> Settings:
    from crag.config import Settings

    overrides.setdefault("budget", budget_overrides(args))
    index = {
        "path": getattr(args, "index", None),
        "chunk_size": getattr(args, "chunk_size", None),
        "chunker": getattr(args, "chunker", None),
        "window_size": getattr(args, "window_size", None),
        "summaries": getattr(args, "summaries", None),
    }
    return Settings.load(args.config, index=index, **overrides)


def _ingest(args: argparse.Namespace) -> int:
    from crag.app.progress import ingest_progress
    from crag.ingestion.configured import ingest_with_settings

    settings = _settings(args)
    with nullcontext(None) if args.quiet else ingest_progress() as progress:
        report = ingest_with_settings(args.paths, settings, progress)
    for reason in report.skipped:
        _say(f"crag: skipped: {reason}")
    for reason in report.empty:
        _say(f"crag: empty: {reason}")
    skipped = f", {report.files_skipped} skipped" if report.skipped else ""
    empty = f", {report.files_empty} empty" if report.empty else ""
    print(
        f"{report.files_read} file(s) read, {report.files_unchanged} unchanged{skipped}{empty}, "
        f"{report.chunks_added} chunk(s) added; {report.chunks_total} chunk(s) in {settings.index.path}"
    )
    return PARTIAL if report.skipped or report.empty else 0


PARTIAL = 3
"""`crag ingest`'s exit status when some files were left out and the rest ingested."""


def _ask(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from crag._offload import settle_heap
    from crag.app.progress import AnswerPrinter, run_with_progress, step_progress
    from crag.printable import printable_json
    from crag.workflows.explain import WEB_FIX
    from crag.workflows.factory import build_workflow

    settings = _settings(
        args,
        web_search={"corpus": args.web_corpus},
        grader={"upper": args.upper, "lower": args.lower},
        retriever={"top_k": args.top_k, "kind": args.retriever},
        postprocess={
            "stages": args.postprocess,
            "similarity_cutoff": args.similarity_cutoff,
            "required_keywords": args.require,
            "exclude_keywords": args.exclude,
            "rerank": args.rerank,
            "rerank_depth": args.rerank_depth,
        },
    )
    try:
        args.question.encode("utf-8")
    except UnicodeEncodeError as exc:  # bytes that are not UTF-8 reach argv as lone surrogates
        from crag.errors import QueryError

        raise QueryError(f"The question is not UTF-8 text (at character {exc.start + 1}); "
                         "check the terminal's encoding, or retype it.") from None
    workflow = build_workflow(settings)
    settle_heap()  # the collector back on, off what is loaded
    stream = not args.json and (sys.stdout.isatty() if args.stream is None else args.stream)
    printer = AnswerPrinter() if stream else None
    # Streaming, progress is plain lines: a live display would hold partial lines back.
    progress = step_progress(rich=False if stream else None)
    with nullcontext(lambda event: None) if args.quiet else progress as on_step:
        on_step = printer.step(on_step) if printer else on_step
        result = asyncio.run(run_with_progress(workflow, args.question, on_step, printer))
    if printer:
        printer.end()
    if args.trace:
        _write_trace(args.trace, result.trace)
    explanation = result.trace.explanation
    if explanation is not None and not explanation.web and result.verdict.value != "correct":
        # The one line naming the fix; the run's `degraded` list says what happened.
        _say(f"crag: note: verdict {result.verdict.value}, but there is no web to search: {WEB_FIX}")
    if args.json:
        print(printable_json(json.dumps(result.model_dump(mode="json"), ensure_ascii=False)))
    else:  # a streamed answer is on the screen already
        print(_format(result, answer=not stream))
    return 0


def _format(result: CragResult, *, answer: bool = True) -> str:
    """The result as the terminal shows it; what documents wrote (the answer quotes them, the
    sources name them) with its control characters escaped, each source and note on one line."""
    from crag.printable import printable

    lines = [printable(result.answer)] if answer else []
    lines += ["", f"verdict: {result.verdict.value}"]
    if result.rewritten_query:
        lines.append(f"web query: {printable(result.rewritten_query, lines=False)}")
    lines.append("grades: " + ", ".join(f"{g.score:.2f}" for g in result.grades))
    if result.sources:
        lines.append("sources:")
        for s in result.sources:
            lines.append(f"  [{s.number}] {s.kind}: {printable(s.label(), lines=False)}")
    for note in result.degraded:
        lines.append(f"degraded: {printable(note, lines=False)}")
    if result.cost.calls or result.cost.cache_hits or result.cost.notes:
        lines.append(result.cost.line())  # a run without a model cost nothing: no line
    return "\n".join(lines)


def _cache(args: argparse.Namespace) -> int:
    from crag.index.grade_cache import FILE_NAME, GradeCache

    settings = _settings(args)
    if args.store:
        return _postgres_cache(args.action, args.store, settings)
    if not settings.index.path.is_dir():
        from crag.errors import IndexNotFoundError

        raise IndexNotFoundError(f"No index at {settings.index.path}, so no grade cache; "
                                 "give one with --index, or build it: crag ingest YOUR_DOCS")
    cache = GradeCache(settings.index.path / FILE_NAME, max_entries=settings.cache.max_entries)
    try:
        if args.action == "clear":
            print(f"cleared {cache.clear()} grade(s) from {cache.path}")
            return 0
        stats = cache.stats()
    finally:
        cache.close()
    _print_stats(stats, settings)
    return 0


def _postgres_cache(action: str, store: str, settings: Settings) -> int:
    """`crag cache` against the grade cache `crag serve` keeps in PostgreSQL."""
    import asyncio

    from crag.app.server.stores import postgres_grade_cache
    from crag.errors import CragError

    cache = postgres_grade_cache(store, settings, timeout=10.0)

    async def work() -> int | CacheStats:
        try:
            return await (cache.aclear() if action == "clear" else cache.astats())
        except Exception as exc:  # noqa: BLE001 - asyncpg's and the network's: one line, as any error
            raise CragError(f"The grade cache in {cache.where} could not be used ({type(exc).__name__}: "
                            f"{exc}); is the database up?") from None
        finally:
            await cache.aclose()

    outcome = asyncio.run(work())
    if isinstance(outcome, int):
        print(f"cleared {outcome} grade(s) from {cache.where} table crag_grades")
    else:
        _print_stats(outcome, settings)
    return 0


def _print_stats(stats: CacheStats, settings: Settings) -> None:
    state = "on" if settings.cache.enabled else "off ([cache] enabled = false)"
    print(f"{stats.path}: {stats.entries:,} grade(s) of at most {stats.max_entries:,}, "
          f"{stats.bytes / 1e6:.1f} MB; cache {state}")


def _draw(args: argparse.Namespace) -> int:
    from crag.app.render import graph_html, mermaid, trace_html
    from crag.workflows import CorrectiveRAGWorkflow

    workflow, trace = CorrectiveRAGWorkflow, _read_trace(args.trace) if args.trace else None
    if args.format == "mermaid":
        text = mermaid(workflow, trace)
    else:
        text = graph_html(workflow) if trace is None else trace_html(workflow, trace)
    suffix = "mmd" if args.format == "mermaid" else "html"
    out = args.out or Path(f"crag-{'graph' if trace is None else 'trace'}.{suffix}")
    if str(out) == "-":
        sys.stdout.write(text)
        return 0
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        from crag.errors import ConfigError

        raise ConfigError(
            f"Cannot write {out}: {exc.strerror or exc}; give a file to --out."
        ) from None
    print(f"wrote {out}")
    return 0


def _write_trace(path: Path, trace: RunTrace) -> None:
    from crag.errors import TraceError

    try:
        path.write_text(trace.model_dump_json(indent=2), encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"Cannot write the trace to {path}: {exc.strerror or exc}.") from None
    print(f"crag: trace written to {path}; draw it with: crag draw --trace {path}", file=sys.stderr)


def _read_trace(path: Path) -> RunTrace:
    from pydantic import ValidationError

    from crag.errors import TraceError
    from crag.trace import RunTrace

    try:
        return RunTrace.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise TraceError(f"No trace file at {path}; save one with: crag ask QUESTION --trace {path}") from None
    except OSError as exc:
        raise TraceError(f"Cannot read the trace {path}: {exc.strerror or exc}.") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the file"
        raise TraceError(f"{path} is not a crag run trace ({where}: {first['msg']}); "
                         "save one with: crag ask QUESTION --trace FILE") from None


DEMO_QUESTIONS = (
    "What warranty does Lumen give on the Helio H10?",  # the handbook answers this
    "Who invented the lithium-ion battery?",  # it does not: the web search must
)


def _serve(args: argparse.Namespace) -> int:
    from crag._logs import log_plainly
    from crag.app.server import serve

    log_plainly()  # this process serves: a database outage is said once a minute, not per retry
    serve(_settings(
        args,
        web_search={"corpus": args.web_corpus},
        server={"host": args.host, "port": args.port, "store": args.store},
    ))
    return 0


MCP_HINT = "crag mcp needs the MCP SDK, which is not installed: pip install 'crag-workflows[mcp]'"


def _mcp(args: argparse.Namespace) -> int:
    import asyncio
    from importlib.util import find_spec

    from crag.index.layout import OldIndexFormatError, live_version

    if find_spec("mcp") is None:
        _say(f"crag: error: {MCP_HINT}")
        return 2
    settings = _settings(args, web_search={"corpus": args.web_corpus})
    path = settings.index.path
    try:  # checked here, as the index loads beside the handshake: a wrong path fails at once
        live_version(path)
    except OldIndexFormatError:
        pass  # loading it says how to upgrade it
    from crag.app.mcp_engine import Engine
    from crag.app.mcp_server import serve_stdio

    engine = Engine(settings)
    # The workflow loads in a thread while the handshake is answered: both are Python under one
    # GIL, so starting it before the SDK's import would only slow that import (the handshake).
    engine.start_loading(settle_heap=True)  # this process is crag mcp's own
    asyncio.run(serve_stdio(engine, allow_ingest=args.allow_ingest))
    return 0


def _demo(args: argparse.Namespace) -> int:
    import tempfile
    from importlib.resources import files

    from crag.config import Settings
    from crag.ingestion import ingest
    from crag.workflows.factory import build_workflow

    samples = files("crag") / "sample_data"
    if args.export is not None:
        return _export_samples(Path(str(samples)), args.export)
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


def _export_samples(samples: Path, out: Path) -> int:
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


if __name__ == "__main__":
    sys.exit(main())
