"""Shared fixtures. Tests never reach the network: only loopback connections are allowed."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from blockbuster import BlockBuster, blockbuster_ctx

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"  # loopback servers
for _name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TAVILY_API_KEY", "TAVILY_PROJECT",
              "TAVILY_HTTP_PROXY", "TAVILY_HTTPS_PROXY"):
    os.environ.pop(_name, None)

import crag  # noqa: E402
from crag import ChunkIndex, Settings, ingest  # noqa: E402

SAMPLES = Path(crag.__file__).parent / "sample_data"
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: object) -> None:
    host = address[0] if isinstance(address, tuple) else address
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
        raise OSError(f"tests may not reach the network (tried {address!r})")
    return _real_connect(self, address)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _loopback_only)


@pytest.fixture
def no_blocking() -> Iterator[BlockBuster]:
    """A blocking call (file I/O, `time.sleep`, a socket, SQLite...) made by crag's code on
    the event loop fails the test. Build workflows before the test body (in a fixture):
    building loads files on purpose, and an async test's body runs on the loop."""
    with blockbuster_ctx("crag") as blockbuster:
        yield blockbuster


@pytest.fixture(scope="session")
def sample_index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample handbook, ingested once per session."""
    path = tmp_path_factory.mktemp("sample") / "index"
    ingest([SAMPLES / "docs"], path)
    return path


@pytest.fixture(scope="session")
def sample_index(sample_index_dir: Path) -> ChunkIndex:
    return ChunkIndex.load(sample_index_dir)


@pytest.fixture
def sample_settings(sample_index_dir: Path) -> Settings:
    """Offline settings: the sample index, and the sample 'web' corpus for web search."""
    return Settings.load(
        env={}, index={"path": sample_index_dir}, web_search={"corpus": SAMPLES / "web.jsonl"}
    )
