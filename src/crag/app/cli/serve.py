"""`crag serve`: the workflow over HTTP, until interrupted (crag.app.server)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from crag.app.cli.common import settings_for
from crag.cli_flags import add_budget_flags, add_collection_flag


def add(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve the workflow over HTTP (llama-agents-server)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8000)")
    p.add_argument("--index", type=Path)
    p.add_argument("--web-corpus", type=Path, help="folder or .jsonl searched as the web (offline)")
    p.add_argument("--store", metavar="FILE|URL",
                   help="where runs are kept: a SQLite file (default: server.db in the index folder) "
                   "or a postgresql:// URL shared by several servers")
    add_collection_flag(p, repeatable=True)
    add_budget_flags(p)
    p.set_defaults(func=run, owns_process=True)


def run(args: argparse.Namespace) -> int:
    from crag._logs import log_plainly
    from crag.app.server import serve

    log_plainly()  # this process serves: a database outage is said once a minute, not per retry
    serve(settings_for(
        args,
        web_search={"corpus": args.web_corpus},
        server={"host": args.host, "port": args.port, "store": args.store, "collections": args.collections},
    ))
    return 0
