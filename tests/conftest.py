"""Shared fixtures. Tests never reach the network: only loopback connections are allowed.

Helpers that are not fixtures live in `support/` (tests/support/__init__.py)."""

from __future__ import annotations

import inspect
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from blockbuster import BlockBuster, blockbuster_ctx

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"  # loopback servers
for _name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TAVILY_API_KEY", "TAVILY_PROJECT",
              "TAVILY_HTTP_PROXY", "TAVILY_HTTPS_PROXY"):
    os.environ.pop(_name, None)

# After the environment above: these import crag.
from support.paths import SAMPLES  # noqa: E402
from support.postgres import PostgresCluster, postgres_bin  # noqa: E402

from crag import ChunkIndex, Settings, ingest  # noqa: E402

_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: object) -> None:
    host = address[0] if isinstance(address, tuple) else address
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
        raise OSError(f"tests may not reach the network (tried {address!r})")
    return _real_connect(self, address)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _loopback_only)


@pytest.fixture(autouse=True)
def _secrets_forgotten() -> Iterator[None]:
    """The keys a test registers (`crag.errors.register_secret`) are forgotten after it: a
    password Hypothesis made up ("--data") redacted "--dataset" from a later test's message."""
    import crag.errors

    before = set(crag.errors._secrets)
    yield
    crag.errors._secrets.intersection_update(before)


@pytest.fixture
def no_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run where no crag.toml is, with no model or search key in the environment."""
    monkeypatch.chdir(tmp_path)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TAVILY_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_blocking() -> Iterator[BlockBuster]:
    """A blocking call (file I/O, `time.sleep`, a socket, SQLite...) made by crag's code on
    the event loop fails the test. Build workflows before the test body (in a fixture):
    building loads files on purpose, and an async test's body runs on the loop.

    Every async test has it already (`_no_blocking_in_async_tests`); a sync test asks for it
    when it drives a loop itself (`workflow.ask`)."""
    with blockbuster_ctx("crag") as blockbuster:
        yield blockbuster


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "allow_blocking(reason): this async test may block the event loop from crag's code, "
        "and the reason says why (a test's own setup on the loop, a blocking store on purpose)",
    )


@pytest.fixture(autouse=True)
def _no_blocking_in_async_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """BlockBuster for every async test: crag's code blocking the event loop fails it, unless
    the test is marked `allow_blocking("why")`.

    What a test's own coroutine calls synchronously (`build_workflow`, `ingest`, a component's
    constructor) may block: that is the test's setup, done where it reads best, and crag's
    synchronous API blocks by definition. What runs under one of crag's coroutines or the
    loop's callbacks (a step, a component's async method, a door) may not. The `no_blocking`
    fixture makes no such exception."""
    allowed = request.node.get_closest_marker("allow_blocking")
    if allowed is not None and not (allowed.args and str(allowed.args[0]).strip()):
        pytest.fail("allow_blocking needs a reason: @pytest.mark.allow_blocking(\"why\")")
    test = getattr(request.node, "function", None)
    if not inspect.iscoroutinefunction(test) or allowed is not None or "no_blocking" in request.fixturenames:
        yield
        return
    blockbuster = BlockBuster("crag")
    for function in blockbuster.functions.values():
        function.can_block_predicate = _or_called_from_a_test(function.can_block_predicate)
        function.can_block_functions = [*function.can_block_functions,
                                        *((file, names) for file, names, _why in DEPENDENCIES_MAY_BLOCK)]
    blockbuster.activate()
    try:
        yield
    finally:
        blockbuster.deactivate()


# A dependency's own blocking call on the loop, beneath crag's coroutine: (its file, its
# functions, why it is let be). Each is the dependency's design, and too small to matter.
DEPENDENCIES_MAY_BLOCK = [
    ("asyncpg/connect_utils.py", {"_parse_connect_dsn_and_args"},
     "asyncpg looks for ~/.pgpass and ~/.postgresql/'s certificates (a stat each) per connection"),
    ("llama_agents/server/_store/postgres/migrate.py", {"run_migrations"},
     "llama-agents-server lists its migration files once, as a PostgreSQL store starts"),
]

_ASYNC = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_TESTS = str(Path(__file__).resolve().parent)


def _or_called_from_a_test(own: Callable[..., bool]) -> Callable[..., bool]:
    """BlockBuster's own exception for a call (`own`: a socket in non-blocking mode...), or:
    the nearest coroutine up the stack is the tests' (a test, a helper, an async fixture, a
    fake component), so no coroutine of crag's stands between: a test called crag's
    synchronous code itself."""

    def allowed(*args: object, **kwargs: object) -> bool:
        if own(*args, **kwargs):
            return True
        frame = inspect.currentframe()
        while frame is not None and not frame.f_code.co_flags & _ASYNC:
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename.startswith(_TESTS)

    return allowed


@pytest.fixture(scope="session")
def sample_index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample handbook, ingested once per session."""
    path = tmp_path_factory.mktemp("sample") / "index"
    ingest([SAMPLES / "docs"], path)
    return path


@pytest.fixture
def own_sample_index_dir(sample_index_dir: Path, tmp_path: Path) -> Path:
    """A copy of the sample index for one test, which may write beside it (a grade cache)."""
    return Path(shutil.copytree(sample_index_dir, tmp_path / "index"))


@pytest.fixture(scope="session")
def sample_index(sample_index_dir: Path) -> ChunkIndex:
    return ChunkIndex.load(sample_index_dir)


@pytest.fixture
def sample_settings(sample_index_dir: Path) -> Settings:
    """Offline settings: the sample index, and the sample 'web' corpus for web search."""
    return Settings.load(
        env={}, index={"path": sample_index_dir}, web_search={"corpus": SAMPLES / "web.jsonl"}
    )


@pytest.fixture
def private_postgres() -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster for this test alone; skipped where PostgreSQL is not installed."""
    bin_dir = postgres_bin()
    if bin_dir is None or not (bin_dir / "initdb").exists():
        pytest.skip("PostgreSQL is not installed (no initdb under /usr/lib/postgresql/*/bin or PG_BIN)")
    # Not under pytest's tmp_path: as root, PostgreSQL runs as `postgres`, which cannot enter it.
    cluster = PostgresCluster(Path(tempfile.mkdtemp(prefix="crag-pg-")), bin_dir)
    try:
        yield cluster
    finally:
        cluster.remove()
