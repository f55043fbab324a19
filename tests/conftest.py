"""Shared fixtures. Tests never reach the network: only loopback connections are allowed."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from blockbuster import BlockBuster, blockbuster_ctx

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"  # loopback servers
for _name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TAVILY_API_KEY", "TAVILY_PROJECT",
              "TAVILY_HTTP_PROXY", "TAVILY_HTTPS_PROXY"):
    os.environ.pop(_name, None)

from workflows.utils import get_steps_from_class  # noqa: E402

import crag  # noqa: E402
from crag import ChunkIndex, Settings, ingest  # noqa: E402
from crag.app.render.browser import find_chromium  # noqa: E402

SAMPLES = Path(crag.__file__).parent / "sample_data"
# Every step of the corrective workflow, as the engine itself finds them on the class.
ALL_STEPS = sorted(get_steps_from_class(crag.CorrectiveRAGWorkflow))
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# A test module that opens pages or prints PDFs in Chromium: `pytestmark = BROWSER`.
BROWSER = [
    pytest.mark.browser,
    pytest.mark.skipif(
        find_chromium() is None,
        reason="no Chromium: install Debian's chromium package (apt-get install -y chromium), as .ci/run does",
    ),
]

T = TypeVar("T")

_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: object) -> None:
    host = address[0] if isinstance(address, tuple) else address
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
        raise OSError(f"tests may not reach the network (tried {address!r})")
    return _real_connect(self, address)


async def finishes(awaitable: Awaitable[T], within: float = 10.0) -> T:
    """`await awaitable`, failing the test if it has not ended after `within` seconds: a guard
    against a hang (a timeout not honoured), never a measure of speed."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=within)
    if not done:
        task.cancel()
        pytest.fail(f"still running after {within:g} s: it hangs")
    return task.result()


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _loopback_only)


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


# Passages on nothing the multi-hop tests ask about: the corpus they share with the passages
# under test, so that retrieval and IDF have something to tell those apart from.
FILLER = [
    {"doc_id": f"filler-{i}", "title": title, "text": text}
    for i, (title, text) in enumerate([
        ("Harbour", "The harbour of the old town holds fishing boats and a lighthouse."),
        ("Orchard", "Apple orchards cover the hills south of the river."),
        ("Railway", "The railway reached the valley in 1871 and closed in 1962."),
        ("Lighthouse", "The lighthouse was painted red and white in 1920."),
    ])
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """Write `rows` to `path` as JSON lines (a web corpus, or documents to ingest)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def ingested(root: Path, docs: dict[str, str]) -> Path:
    """Write `docs` (file name -> text) under `root`/docs and ingest them into `root`/index."""
    (root / "docs").mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (root / "docs" / name).write_text(text, encoding="utf-8")
    ingest([root / "docs"], root / "index")
    return root / "index"


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


CI_POSTGRES = Path(__file__).resolve().parents[1] / ".ci" / "postgres"


def _postgres_bin() -> Path | None:
    """Where `.ci/postgres` finds PostgreSQL's programs (PG_BIN, or the newest installed)."""
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    return found[-1] if found else None


class PostgresCluster:
    """A throwaway PostgreSQL cluster of one test's own (`.ci/postgres`), to stop, restart,
    freeze and thaw while a server uses it, without touching the shared one."""

    def __init__(self, folder: Path, bin_dir: Path) -> None:
        self.folder, self.bin = folder, bin_dir
        started = subprocess.run([str(CI_POSTGRES), "start", str(folder)], capture_output=True, check=False, text=True)
        if started.returncode != 0:
            raise RuntimeError(f"PostgreSQL did not start: {started.stderr}")
        self.url = started.stdout.strip()
        self.port = self.url.rsplit(":", 1)[1].split("/")[0]

    def _pg_ctl(self, *args: str) -> None:
        # As root, PostgreSQL runs as `postgres` (see .ci/postgres).
        owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*owner, str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), *args],
                       check=True, capture_output=True)

    def stop(self) -> None:
        """Stop it at once, as a crash or a lost host would: every connection is cut."""
        self._pg_ctl("-m", "immediate", "-w", "stop")

    def start(self) -> None:
        """Start it again on the same port, with the options `.ci/postgres` gave it."""
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                   f"-c unix_socket_directories={self.folder} -c fsync=off")
        self._pg_ctl("-l", str(self.folder / "server.log"), "-w", "-t", "60", "-o", options, "start")

    def freeze(self) -> None:
        """SIGSTOP the postmaster, then its children (backends, helpers): connections stay
        open and nothing answers, as on a hung host. The postmaster first, so that it forks
        no backend the second step would miss."""
        postmaster = self._postmaster()
        os.kill(postmaster, signal.SIGSTOP)
        self._signal(self._children(postmaster), signal.SIGSTOP)

    def thaw(self) -> None:
        postmaster = self._postmaster()
        self._signal(self._children(postmaster), signal.SIGCONT)
        os.kill(postmaster, signal.SIGCONT)

    def _postmaster(self) -> int:
        return int((self.folder / "data" / "postmaster.pid").read_text().split()[0])

    @staticmethod
    def _children(parent: int) -> list[int]:
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()  # after the name, which may hold spaces
            except OSError:
                continue  # it ended meanwhile
            if int(fields[1]) == parent:
                children.append(int(stat.parent.name))
        return children

    @staticmethod
    def _signal(pids: list[int], signum: int) -> None:
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def remove(self) -> None:
        if (self.folder / "data" / "postmaster.pid").exists():
            self.thaw()  # a frozen cluster cannot stop
        subprocess.run([str(CI_POSTGRES), "stop", str(self.folder)], capture_output=True, check=False)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def private_postgres() -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster for this test alone; skipped where PostgreSQL is not installed."""
    bin_dir = _postgres_bin()
    if bin_dir is None or not (bin_dir / "initdb").exists():
        pytest.skip("PostgreSQL is not installed (no initdb under /usr/lib/postgresql/*/bin or PG_BIN)")
    # Not under pytest's tmp_path: as root, PostgreSQL runs as `postgres`, which cannot enter it.
    cluster = PostgresCluster(Path(tempfile.mkdtemp(prefix="crag-pg-")), bin_dir)
    try:
        yield cluster
    finally:
        cluster.remove()
