"""Command-line flags that several commands share (ask, serve, eval), and the settings they set."""

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
