"""A secret written into a URL is not printed back (issue 32): a PostgreSQL password given as
`user:password@` or as `?password=` is hidden from `crag serve`'s start-up line and `crag cache`'s
errors, and a key sent in a request's query string never reaches the server's access log."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote_plus

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.loopback import uvicorn_serving

from crag import Settings
from crag.app.server import build_server
from crag.app.server.ops.transport import uvicorn_options
from crag.app.server.store import store_for
from crag.errors import hide_password, redact

SERVER_KEY = "PLANTED.server.51c0ffee"
SCOPED = "crag_0a1b2c3d4e5f_" + "Pl4nted-scoped_key" * 2 + "x" * 7  # crag_<id>_<secret>, 43 characters
ASIDE = st.lists(st.sampled_from(["sslmode=require", "application_name=crag", "connect_timeout=5"]), max_size=3)


@given(password=st.text(min_size=6, max_size=20).filter(lambda p: p.strip() == p and "\x00" not in p),
       form=st.sampled_from(["user", "query", "sslpassword", "both"]), aside=ASIDE, at=st.integers(0, 3))
def test_a_password_in_either_form_is_hidden_and_the_rest_kept(
    password: str, form: str, aside: list[str], at: int
) -> None:
    user = f"crag:{quote(password, safe='')}@" if form in ("user", "both") else "crag@"
    params = list(aside)
    if form in ("query", "both", "sslpassword"):
        name = "sslpassword" if form == "sslpassword" else "password"
        params.insert(min(at, len(params)), f"{name}={quote_plus(password)}")
    url = f"postgresql://{user}db.example:5432/crag" + ("?" + "&".join(params) if params else "")
    shown = hide_password(url)
    assert shown == "postgresql://crag@db.example:5432/crag" + ("?" + "&".join(aside) if aside else "")
    assert password not in redact(f"connection to {url} failed")  # and messages quoting it lose it


def test_the_serve_start_up_line_names_the_store_without_its_password(tmp_path: Path) -> None:
    for url in ("postgresql://crag@db.example/crag?password=hunter2-query",
                "postgresql://crag:hunter2-user@db.example/crag?sslmode=require&password=hunter2-query"):
        settings = Settings.load(env={}, index={"path": tmp_path / "index"}, server={"store": url})
        where = store_for(settings).where  # what `crag serve` prints: "runs kept in postgresql WHERE"
        assert "hunter2" not in where and where.startswith("postgresql://crag@db.example/crag")


QUERIES = [  # (query, the secret in it)
    ("key=PLANTED.q1.2a9f", "PLANTED.q1.2a9f"),
    ("limit=2&api_key=PLANTED.q2.77b1", "PLANTED.q2.77b1"),
    ("apiKey=PLANTED.q3.c3d4&sse=false", "PLANTED.q3.c3d4"),
    ("access_token=PLANTED.q4.e5f6", "PLANTED.q4.e5f6"),
    ("x-api-key=PLANTED.q5.0a0b", "PLANTED.q5.0a0b"),
    ("k=sk-proj-abcdef123456", "sk-proj-abcdef123456"),  # shaped like a key, whatever its name
    (f"q={SERVER_KEY}", SERVER_KEY),  # this server's own key, whatever its name
    (quote(f"{SERVER_KEY}"), SERVER_KEY),  # bare
    (f"limit=2&{SERVER_KEY}=1", SERVER_KEY),  # the key as a parameter's name, with a value
    ("".join(f"%{b:02X}" for b in SERVER_KEY.encode()) + "=1", SERVER_KEY),  # ... percent-encoded
    (f"{SCOPED}", SCOPED),  # a key of `crag keys`, by its shape, as a name
    (f"{SCOPED}=", SCOPED),
    (f"q={SCOPED}", SCOPED),
    (f"%63{SCOPED[1:]}=1", SCOPED),  # its first letter encoded
]


@pytest.mark.parametrize("with_key", [True, False], ids=["api-key", "no-key"])
def test_a_key_in_the_query_string_is_not_written_to_the_access_log(
    sample_index_dir: Path, tmp_path: Path, with_key: bool
) -> None:
    env = {"CRAG_API_KEY": SERVER_KEY} if with_key else {}
    settings = Settings.load(env=env, index={"path": sample_index_dir}, server={"store": str(tmp_path / "s.db")})
    access_log: list[str] = []
    with uvicorn_serving(build_server(settings).app, log_level="info") as url:
        logger = logging.getLogger("uvicorn.access")  # set up by uvicorn as it started: join it now
        keep = logging.Handler()
        keep.emit = lambda record: access_log.append(record.getMessage())  # type: ignore[method-assign]
        logger.addHandler(keep)
        try:
            for query, _ in QUERIES:
                for path in ("/health", "/handlers", "/files/0123456789abcdef"):  # open, keyed, refused
                    httpx.get(f"{url}{path}?{query}")
        finally:
            logger.removeHandler(keep)
    assert len(access_log) == 3 * len(QUERIES)  # every request is logged, with its path
    assert all("GET /health?" in line or "GET /handlers?" in line or "GET /files/" in line for line in access_log)
    for _, secret in QUERIES:
        if secret == SERVER_KEY and not with_key:
            continue  # a server with no key has no key to hide: that string is only a query
        assert not [line for line in access_log if secret in unquote_plus(line) or quote(secret) in line], secret
    assert any("limit=2" in line for line in access_log)  # the rest of the query is kept


PATHS = [  # a key in the path is printed too: a guessed route, a run id, a file id
    f"/{SCOPED}",
    f"/handlers/{SCOPED}",
    f"/files/{SERVER_KEY}",
    "/handlers/" + "".join(f"%{b:02X}" for b in SERVER_KEY.encode()),  # percent-encoded
    f"/handlers/x{SCOPED}/trace",
    f"/health?{SERVER_KEY}=1",
]


def test_a_key_in_the_path_is_not_written_to_the_access_log(sample_index_dir: Path, tmp_path: Path) -> None:
    settings = Settings.load(env={"CRAG_API_KEY": SERVER_KEY}, index={"path": sample_index_dir},
                             server={"store": str(tmp_path / "s.db")})
    options = uvicorn_options(settings.server)  # as `crag serve` runs uvicorn
    access_log: list[str] = []
    with uvicorn_serving(build_server(settings).app, log_level="info", **options) as url:
        logger = logging.getLogger("uvicorn.access")
        keep = logging.Handler()
        keep.emit = lambda record: access_log.append(record.getMessage())  # type: ignore[method-assign]
        logger.addHandler(keep)
        try:
            for path in PATHS:
                httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {SERVER_KEY}"})
        finally:
            logger.removeHandler(keep)
    assert len(access_log) == len(PATHS)
    for secret in (SERVER_KEY, SCOPED):
        assert not [line for line in access_log if secret in unquote_plus(line)], secret
    assert all("redacted" in line for line in access_log)  # each line says where it hid one
