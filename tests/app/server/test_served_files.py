"""`/files/ID` serves what the index recorded and nothing else, and nothing it serves can act in
the server's origin (issue 32): a file swapped for a link (or a folder on its way, or a FIFO)
after ingest is a 404, checked again at every request; every reply has a type from an
allow-list, is never sniffed, and is sandboxed, so an ingested HTML page runs no script in
Chromium."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.loopback import uvicorn_serving
from support.marks import BROWSER
from support.paths import DOCUMENTS

import crag
from crag.app.server import build_server
from crag.app.server.routes.files import byte_range, headers_for
from crag.trace import file_id

DATA = DOCUMENTS / "good"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
# Every way an HTML page starts script on its own, each trying to mark the page as run.
HOSTILE_HTML = """<!DOCTYPE html><html><head><title>notes</title>
<meta http-equiv="refresh" content="0;url=javascript:document.title='ran-refresh'">
<script>document.title = 'ran-script'; window.ran = 'script';</script></head>
<body onload="window.ran = 'onload'">
<p>The Helio H10 inverter shuts down at 85 degrees Celsius to protect its cells.</p>
<img src="data:," onerror="window.ran = 'onerror'"><svg onload="window.ran = 'svg'"></svg>
<iframe srcdoc="<script>parent.ran = 'iframe'</script>"></iframe>
<a id="go" href="javascript:window.ran = 'link'">more</a>
</body></html>"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs/ (a PDF, an HTML page, Markdown, a Word file) ingested into index/, and beside it
    secret/ with a file no index lists."""
    root = tmp_path_factory.mktemp("served")
    docs = root / "docs"
    (docs / "sub").mkdir(parents=True)
    shutil.copy(DATA / "handbook.pdf", docs / "handbook.pdf")
    shutil.copy(DATA / "installer.docx", docs / "installer.docx")
    (docs / "page.html").write_text(HOSTILE_HTML, encoding="utf-8")
    (docs / "sub" / "notes.md").write_text("# Notes\n\nThe inverter's fan starts at 60 degrees.\n")
    (root / "secret").mkdir()
    (root / "secret" / "notes.md").write_text("root:$6$not-yours:19000:0:99999:7:::\n")
    crag.ingest([docs], root / "index")
    return root


@pytest.fixture(scope="module")
def url(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = crag.Settings.load(env={}, index={"path": corpus / "index"},
                                  server={"store": str(tmp_path_factory.mktemp("store") / "server.db")})
    with uvicorn_serving(build_server(settings).app) as base:
        yield base


def link(path: Path) -> str:
    return f"/files/{file_id(str(path.resolve()))}"


def test_a_file_swapped_for_a_link_after_ingest_is_not_followed(corpus: Path, url: str) -> None:
    notes = corpus / "docs" / "sub" / "notes.md"
    address = link(notes)
    assert httpx.get(url + address).status_code == 200
    secret = corpus / "secret" / "notes.md"
    original = notes.read_bytes()
    try:
        for swap in ("file", "folder"):
            if swap == "file":  # the file itself becomes a link to the secret
                notes.unlink()
                notes.symlink_to(secret)
            else:  # a folder on its way does: the same name inside it is the secret
                notes.unlink()
                (corpus / "docs" / "sub").rmdir()
                (corpus / "docs" / "sub").symlink_to(corpus / "secret", target_is_directory=True)
            reply = httpx.get(url + address)
            assert reply.status_code == 404, swap
            assert b"not-yours" not in reply.content, swap
            if swap == "folder":
                (corpus / "docs" / "sub").unlink()
                (corpus / "docs" / "sub").mkdir()
    finally:
        notes.unlink(missing_ok=True)
        notes.write_bytes(original)
    assert httpx.get(url + address).content == original  # checked at each request, not once


def test_only_a_regular_file_is_read(corpus: Path, url: str) -> None:
    notes = corpus / "docs" / "sub" / "notes.md"
    original = notes.read_bytes()
    try:
        notes.unlink()
        os.mkfifo(notes)  # no writer: opening it to read would wait for ever
        assert httpx.get(url + link(notes), timeout=10).status_code == 404
        notes.unlink()
        notes.mkdir()
        assert httpx.get(url + link(notes), timeout=10).status_code == 404
    finally:
        if notes.is_dir():
            notes.rmdir()
        notes.unlink(missing_ok=True)
        notes.write_bytes(original)


@pytest.mark.parametrize("name,kind,disposition,sandboxed", [
    ("handbook.pdf", "application/pdf", "inline", False),  # Chromium's viewer refuses a sandbox
    ("page.html", "text/html; charset=utf-8", "inline", True),
    ("sub/notes.md", "text/plain; charset=utf-8", "inline", True),
    ("installer.docx", "application/octet-stream", "attachment", True),
])
def test_every_reply_has_an_allowed_type_is_never_sniffed_and_is_sandboxed(
    corpus: Path, url: str, name: str, kind: str, disposition: str, sandboxed: bool
) -> None:
    reply = httpx.get(url + link(corpus / "docs" / name))
    assert reply.status_code == 200 and reply.content == (corpus / "docs" / name).read_bytes()
    assert reply.headers["content-type"] == kind
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["content-disposition"].startswith(disposition + ";")
    csp = reply.headers.get("content-security-policy", "")
    assert csp.startswith("sandbox;") if sandboxed else csp == ""


@pytest.mark.parametrize("name", ["x.svg", "x.xhtml", "x.xml", "x.js", "x.mhtml", "x.HTML.exe", "x", "x.pdf.svg"])
def test_a_type_off_the_allow_list_is_an_attachment(name: str) -> None:
    kind, headers = headers_for(name)
    assert (kind, headers["Content-Disposition"].split(";")[0]) == ("application/octet-stream", "attachment")
    assert headers["Content-Security-Policy"].startswith("sandbox;")  # all but a PDF


def test_a_file_name_cannot_break_out_of_its_header() -> None:
    _, headers = headers_for('a"; filename=evil.html\r\nSet-Cookie: x=1.txt')
    assert "\r" not in headers["Content-Disposition"] and "\n" not in headers["Content-Disposition"]
    assert '"' not in headers["Content-Disposition"]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@BROWSER[0]
@BROWSER[1]
def test_served_html_runs_no_script_in_chromium(browser: object, corpus: Path, url: str) -> None:
    page = browser.new_page()
    page.goto(url + link(corpus / "docs" / "page.html"))
    page.click("#go")  # loaded: its script, handlers and frame have had their chance; now the link
    assert page.title() == "notes"
    assert "inverter shuts down" in page.inner_text("body")  # shown, but inert
    assert page.evaluate("window.ran") is None
    assert page.evaluate("window.origin") == "null"  # an origin of its own: no key, no cookies
    page.close()


def test_one_byte_range_is_served_as_asked_so_a_viewer_opens_a_late_page_first(corpus: Path, url: str) -> None:
    pdf = (corpus / "docs" / "handbook.pdf").read_bytes()
    address = url + link(corpus / "docs" / "handbook.pdf")
    part = httpx.get(address, headers={"Range": "bytes=100-199"})
    assert (part.status_code, part.content) == (206, pdf[100:200])
    assert part.headers["content-range"] == f"bytes 100-199/{len(pdf)}"
    tail = httpx.get(address, headers={"Range": "bytes=-10"})
    assert (tail.status_code, tail.content) == (206, pdf[-10:])
    whole = httpx.get(address, headers={"Range": "bytes=0-1,5-9"})  # several: the whole file
    assert (whole.status_code, whole.content, whole.headers["accept-ranges"]) == (200, pdf, "bytes")
    past = httpx.get(address, headers={"Range": f"bytes={len(pdf)}-"})
    assert (past.status_code, past.headers["content-range"]) == (416, f"bytes */{len(pdf)}")


@pytest.mark.parametrize(("header", "expected"), [
    (None, None), ("bytes=0-", (0, 999)), ("bytes=10-2000", (10, 999)), ("bytes=-0", None),
    ("bytes=9-3", None), ("items=0-5", None), ("bytes=", None), ("bytes=-", None),
])
def test_a_range_header_is_read_as_the_standard_says(header: str | None, expected: tuple | None) -> None:
    assert byte_range(header, 1000) == expected
    with pytest.raises(ValueError, match="range starts at byte 1000, the file has 1000"):
        byte_range("bytes=1000-", 1000)
