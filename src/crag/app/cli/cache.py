"""`crag cache stats|clear`: the grade cache beside the index, or with `--store URL` the one
`crag serve` keeps in PostgreSQL (crag.app.grade_cache)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from crag.app.cli.common import settings_for
from crag.cli_flags import add_collection_flag


def add(sub: Any) -> None:
    p = sub.add_parser("cache", help="the grade cache (beside the index, or in --store URL): stats, or clear it")
    p.add_argument("action", choices=["stats", "clear"])
    p.add_argument("--index", type=Path)
    p.add_argument("--store", metavar="URL",
                   help="the grade cache of `crag serve` on this postgresql:// store instead")
    add_collection_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from crag.app.grade_cache import cache_stats, clear_cache

    if args.store and args.collection:
        from crag.errors import ConfigError

        # Its grades are keyed by their collection's index, not kept apart: its stats or clear are all of them.
        raise ConfigError("The grade cache in PostgreSQL is shared by every collection; give --store alone "
                          "(stats or clear all of it), or --collection alone (the one beside that collection).")
    settings = settings_for(args)
    if args.action == "clear":
        cleared, where = clear_cache(settings, args.store)
        print(f"cleared {cleared} grade(s) from {where}")
        return 0
    stats = cache_stats(settings, args.store)
    state = "on" if settings.cache.enabled else "off ([cache] enabled = false)"
    print(f"{stats.path}: {stats.entries:,} grade(s) of at most {stats.max_entries:,}, "
          f"{stats.bytes / 1e6:.1f} MB; cache {state}")
    return 0
