"""The `crag` command: ingest, ask, draw, serve, mcp, cache, keys, demo (and eval, calibrate).

One module per command, each with `add(sub)`, which adds its parser, and `run(args)`, which
runs it and returns its exit status; this module parses and turns errors into exit statuses.
Arguments are parsed before anything heavy is imported, so `crag --help` and a wrong flag
answer at once; each command imports what it uses when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from crag.app.cli import ask, cache, demo, draw, ingest, keys, mcp, serve
from crag.app.cli.common import say
from crag.app.cli.demo import DEMO_QUESTIONS
from crag.app.cli.ingest import PARTIAL

__all__ = ["DEMO_QUESTIONS", "PARTIAL", "main"]

COMMANDS = (ingest, ask, draw, serve, mcp, cache, keys, demo)  # in `crag --help`'s order


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
    args = parser().parse_args(argv)
    if getattr(args, "owns_process", False):
        from crag._offload import hold_collection

        # Until the workflow is loaded (`settle_heap`): a fifth of a cold start. These commands
        # own their process, so they tune its collector; `build_workflow` never does.
        hold_collection()
    from workflows.errors import WorkflowTimeoutError

    from crag.errors import CragError

    try:
        return args.func(args)
    except CragError as exc:
        say(f"crag: error: {exc}")
        return 2
    except WorkflowTimeoutError as exc:
        say(f"crag: error: the run was cancelled: {exc} (raise [run] timeout)")
        return 2
    except KeyboardInterrupt:
        say("crag: interrupted")
        return 130
    except BrokenPipeError:  # the reader went away (`crag ask … | head -3`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exiting flushes nowhere
        return 0
    except Exception as exc:  # noqa: BLE001 - a bug: say so in one line unless asked for more
        if os.environ.get("CRAG_DEBUG"):
            raise
        say(f"crag: internal error: {type(exc).__name__}: {exc} (CRAG_DEBUG=1 shows where)")
        return 1


def parser() -> argparse.ArgumentParser:
    """`crag`'s parser: each command's own (`add`), then `eval` and `calibrate`."""
    top = argparse.ArgumentParser(prog="crag", description="Corrective RAG over your documents.")
    top.add_argument("--config", type=Path, help="settings file (default: ./crag.toml if present)")
    sub = top.add_subparsers(required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add(sub)
    from crag.evaluation.cli import add_evaluation_commands

    add_evaluation_commands(sub)
    return top

