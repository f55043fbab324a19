"""`crag mcp`: the workflow to MCP clients (Claude Desktop, VS Code) over stdio
(crag.app.mcp_server); needs crag-workflows[mcp]."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from crag.app.cli.common import say, settings_for
from crag.cli_flags import add_budget_flags, add_collection_flag

MCP_HINT = "crag mcp needs the MCP SDK, which is not installed: pip install 'crag-workflows[mcp]'"


def add(sub: Any) -> None:
    p = sub.add_parser("mcp", help="serve the workflow to MCP clients (Claude Desktop, VS Code) over stdio",
                       description="A Model Context Protocol server on stdin/stdout: tools ask and "
                       "search, the index manifest and run traces as resources. "
                       "Needs crag-workflows[mcp].")
    p.add_argument("--index", type=Path)
    p.add_argument("--web-corpus", type=Path, help="folder or .jsonl searched as the web (offline)")
    p.add_argument("--allow-ingest", action="store_true",
                   help="add the ingest tool, which writes files into the index (off: clients only read)")
    add_collection_flag(p)
    add_budget_flags(p)
    p.set_defaults(func=run, owns_process=True)


def run(args: argparse.Namespace) -> int:
    import asyncio
    from importlib.util import find_spec

    from crag.index.layout import OldIndexFormatError, live_version

    if find_spec("mcp") is None:
        say(f"crag: error: {MCP_HINT}")
        return 2
    settings = settings_for(args, web_search={"corpus": args.web_corpus})
    path = settings.index.path
    try:  # checked here, as the index loads beside the handshake: a wrong path fails at once
        live_version(path)
    except OldIndexFormatError:
        pass  # loading it says how to upgrade it
    from crag.app.mcp_engine import Engine
    from crag.app.mcp_server import serve_stdio

    engine = Engine(settings, collection=args.collection)
    # The workflow loads in a thread while the handshake is answered: both are Python under one
    # GIL, so starting it before the SDK's import would only slow that import (the handshake).
    engine.start_loading(settle_heap=True)  # this process is crag mcp's own
    asyncio.run(serve_stdio(engine, allow_ingest=args.allow_ingest))
    return 0
