"""Command-line flags that several commands share (ask, serve, eval; --collection: ingest, ask,
cache, mcp, serve), and the settings they set."""

from __future__ import annotations

import argparse
from typing import Any


def add_budget_flags(parser: argparse.ArgumentParser) -> None:
    """--budget-calls and --budget-tokens: `[budget] calls` and `tokens` per question."""
    parser.add_argument("--budget-calls", type=int, metavar="N",
                        help="model calls per question; past it the offline components answer")
    parser.add_argument("--budget-tokens", type=int, metavar="N",
                        help="model tokens (in and out) per question")


def budget_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The `[budget]` values the flags give (None: the file or environment decides)."""
    return {"calls": getattr(args, "budget_calls", None), "tokens": getattr(args, "budget_tokens", None)}


def add_collection_flag(parser: argparse.ArgumentParser, *, repeatable: bool = False) -> None:
    """--collection NAME: the named collection under the index folder (`crag.index.collections`),
    as `args.collection`; `repeatable` (crag serve): any number of them, as `args.collections`."""
    if repeatable:
        parser.add_argument("--collection", dest="collections", action="append", metavar="NAME",
                            help="serve only this collection (repeatable; default: every one found)")
        return
    parser.add_argument("--collection", metavar="NAME",
                        help="the named collection (INDEX/collections/NAME; default: the index itself)")
