"""What the commands share: their settings from the flags, one-line messages, a result as the
terminal shows it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from crag.cli_flags import budget_overrides

if TYPE_CHECKING:
    from crag.config import Settings
    from crag.events import CragResult


def say(message: str) -> None:
    """`message` as one line on stderr, without API keys or control characters (a file name in
    a skip line may hold ESC: `crag.printable`)."""
    from crag.errors import redact
    from crag.printable import printable

    message = message.encode("utf-8", "backslashreplace").decode("utf-8")  # a non-UTF-8 path named
    print(printable(" ".join(redact(message).split()), lines=False), file=sys.stderr)


def settings_for(args: argparse.Namespace, **overrides: dict[str, Any]) -> Settings:
    """The settings a command runs with: defaults < `--config` (or ./crag.toml) < `CRAG_*`
    variables < its flags (the index's, the collection's and the budget's here, the rest in
    `overrides`). A `--collection` that cannot name one is a `ConfigError`; one that holds no
    index yet, an `IndexNotFoundError` (but for `crag ingest`, which makes it)."""
    from crag.config import Settings

    overrides.setdefault("budget", budget_overrides(args))
    index = {
        "path": getattr(args, "index", None),
        "chunk_size": getattr(args, "chunk_size", None),
        "chunker": getattr(args, "chunker", None),
        "window_size": getattr(args, "window_size", None),
        "summaries": getattr(args, "summaries", None),
    }
    settings = Settings.load(args.config, index=index, **overrides)
    # Only an ingest makes a collection; any other command reads one that must hold an index.
    existing = not getattr(args, "creates_index", False)
    return settings.for_collection(getattr(args, "collection", None), existing=existing)


def format_result(result: CragResult, *, answer: bool = True) -> str:
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
