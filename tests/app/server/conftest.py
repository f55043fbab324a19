"""Fixtures of the `crag serve` tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.serving import running, server_settings


@pytest.fixture(scope="module")
def base_url(sample_index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server for the module: SQLite store, no API key."""
    store = tmp_path_factory.mktemp("serve") / "server.db"
    with running(server_settings(sample_index_dir, store=str(store))) as url:
        yield url
