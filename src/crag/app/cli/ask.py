"""`crag ask QUESTION`: one question through the run service, as every door asks one
(crag.app.runs; in process, recorded nowhere), its steps shown as they run on stderr, the
answer (streamed in a terminal) and its verdict, grades and sources on stdout."""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crag.app.cli.common import format_result, say, settings_for
from crag.cli_flags import add_budget_flags, add_collection_flag

if TYPE_CHECKING:
    from crag.app.progress import DeltaCallback, StepCallback
    from crag.app.runs import RunService
    from crag.events import CragResult
    from crag.trace import RunTrace


def add(sub: Any) -> None:
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
    add_collection_flag(p)
    add_budget_flags(p)
    p.set_defaults(func=run, owns_process=True)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from crag._offload import settle_heap
    from crag.app.progress import AnswerPrinter, step_progress
    from crag.app.runs import RunService
    from crag.printable import printable_json
    from crag.workflows.explain import WEB_FIX
    from crag.workflows.factory import build_workflow

    settings = settings_for(
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
    runs = RunService.in_process(build_workflow(settings))
    settle_heap()  # the collector back on, off what is loaded
    stream = not args.json and (sys.stdout.isatty() if args.stream is None else args.stream)
    printer = AnswerPrinter() if stream else None
    # Streaming, progress is plain lines: a live display would hold partial lines back.
    progress = step_progress(rich=False if stream else None)
    with nullcontext(lambda event: None) if args.quiet else progress as on_step:
        on_step = printer.step(on_step) if printer else on_step
        result = asyncio.run(ask_through(runs, args.question, on_step, printer))
    if printer:
        printer.end()
    if args.trace:
        write_trace(args.trace, result.trace)
    explanation = result.trace.explanation
    if explanation is not None and not explanation.web and result.verdict.value != "correct":
        # The one line naming the fix; the run's `degraded` list says what happened.
        say(f"crag: note: verdict {result.verdict.value}, but there is no web to search: {WEB_FIX}")
    if args.json:
        print(printable_json(json.dumps(result.model_dump(mode="json"), ensure_ascii=False)))
    else:  # a streamed answer is on the screen already
        print(format_result(result, answer=not stream))
    return 0


async def ask_through(runs: RunService, question: str, on_step: StepCallback | None = None,
                      on_delta: DeltaCallback | None = None) -> CragResult:
    """Start the run (`RunRefused`, a `CragError`, if the question is refused) and follow it,
    each step's progress to `on_step` and the answer as it is written to `on_delta`."""
    from crag.app.progress import follow

    run = await runs.start({"query": question})
    return await follow(run, on_step or (lambda event: None), on_delta)


def write_trace(path: Path, trace: RunTrace) -> None:
    """Save a run's trace for `crag draw --trace`; a `TraceError` if it cannot be written."""
    from crag.errors import TraceError

    try:
        path.write_text(trace.model_dump_json(indent=2), encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"Cannot write the trace to {path}: {exc.strerror or exc}.") from None
    print(f"crag: trace written to {path}; draw it with: crag draw --trace {path}", file=sys.stderr)
