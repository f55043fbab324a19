"""`crag draw`: every possible flow of the workflow, or with `--trace` one run's path, as an
offline HTML page or Mermaid text."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crag.trace import RunTrace


def add(sub: Any) -> None:
    p = sub.add_parser("draw", help="draw every possible flow of the workflow, or one run's path")
    p.add_argument("--trace", type=Path, metavar="FILE.json", help="a run saved by `crag ask --trace`")
    p.add_argument("--out", type=Path, help="file to write, - for stdout "
                   "(default crag-graph.html, crag-trace.html with --trace; .mmd for mermaid)")
    p.add_argument("--format", choices=["html", "mermaid"], default="html")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from crag.app.render import graph_html, mermaid, trace_html
    from crag.workflows import CorrectiveRAGWorkflow

    workflow, trace = CorrectiveRAGWorkflow, read_trace(args.trace) if args.trace else None
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


def read_trace(path: Path) -> RunTrace:
    """A trace `crag ask --trace` saved; a `TraceError` saying what is wrong with it."""
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
