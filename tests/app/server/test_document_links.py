"""A cited document opens at its page: the explanation and the trace page link a PDF source to
`/files/ID#page=N`, and `crag serve` serves exactly the files its index lists, behind its key."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx
import pytest
from support.loopback import uvicorn_serving
from support.paths import DOCUMENTS

import crag
from crag.app.render.explain import explanation_html, file_page_link
from crag.app.server import build_server
from crag.trace import file_id

DATA = DOCUMENTS / "good"
QUESTION = "At what temperature does the inverter shut down?"  # handbook.pdf, p. 12
KEY = "sk-files-test"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("links")
    shutil.copy(DATA / "handbook.pdf", root / "handbook.pdf")
    crag.ingest([root / "handbook.pdf"], root / "index")
    return root / "index"


def test_a_pdf_source_links_to_its_file_at_its_page(index_dir: Path) -> None:
    result = crag.build_workflow(crag.Settings.load(env={}, index={"path": index_dir})).ask(QUESTION)
    (source, *_) = result.sources
    assert (source.file, source.page) == ("handbook.pdf", "12")
    assert source.file_id == file_id(str((index_dir.parent / "handbook.pdf").resolve()))
    html = explanation_html(result.trace.explanation, link=file_page_link)
    assert f'href="/files/{source.file_id}#page=12"' in html
    assert "crag-file" not in explanation_html(result.trace.explanation), "no link without a server"


def test_serve_gives_listed_files_behind_its_key_and_nothing_else(index_dir: Path, tmp_path: Path) -> None:
    settings = crag.Settings.load(env={"CRAG_API_KEY": KEY}, index={"path": index_dir},
                                  server={"store": str(tmp_path / "server.db")})
    listed = file_id(str((index_dir.parent / "handbook.pdf").resolve()))
    secret = tmp_path / "secret.pdf"
    secret.write_bytes(b"%PDF-1.4 not yours")
    with uvicorn_serving(build_server(settings).app) as url:
        auth = {"Authorization": f"Bearer {KEY}"}
        ok = httpx.get(f"{url}/files/{listed}", headers=auth)
        assert ok.status_code == 200 and ok.content == (index_dir.parent / "handbook.pdf").read_bytes()
        assert ok.headers["content-type"] == "application/pdf"
        assert httpx.get(f"{url}/files/{listed}").status_code == 401
        for other in (file_id(str(secret.resolve())), "../../etc/passwd", "%2e%2e%2fsecret.pdf", "0" * 16):
            reply = httpx.get(f"{url}/files/{other}", headers=auth)
            assert reply.status_code == 404, other
            assert b"not yours" not in reply.content and "root:" not in reply.text
        run = httpx.post(f"{url}/workflows/crag/run", json={"start_event": {"query": QUESTION}},
                         headers=auth, timeout=60).json()
        page = httpx.get(f"{url}/handlers/{run['handler_id']}/trace", headers=auth).text
    assert re.search(rf'href="/files/{listed}#page=12"', page)
