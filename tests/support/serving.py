"""`crag serve`'s app under uvicorn on a free loopback port, as the command runs it, with the
settings the server tests give it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from crag import Settings
from crag.app.server import CragServer, build_server
from crag.workflows.factory import build_workflow
from support.paths import SAMPLES
from support.workflow import GatedGrader

ANSWERED = "What warranty does Lumen give on the Helio H10?"  # the handbook answers it


@contextmanager
def running(settings: Settings) -> Iterator[str]:
    """`build_server(settings)` under uvicorn on a free loopback port, in a thread with its own
    event loop, as `crag serve` runs it; yields the base URL and stops it on exit."""
    app = build_server(settings).app
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def server_settings(index_dir: Path, **server: object) -> Settings:
    """Offline settings on `index_dir` and the sample 'web', with `[server]` options."""
    return Settings.load(
        env={},
        index={"path": index_dir},
        web_search={"corpus": SAMPLES / "web.jsonl"},
        server=server,
    )


def server_with(settings: Settings, grader: GatedGrader) -> CragServer:
    """The server of `settings` whose workflow grades with `grader`."""
    from crag.index import ChunkIndex

    index = ChunkIndex.load(settings.index.path)
    return build_server(settings, workflow=build_workflow(settings, index=index, grader=grader), index=index)
