"""`/files/ID` serves what the index recorded and nothing else, and nothing it serves can act in
the server's origin (issue 32): a file swapped for a link (or a folder on its way, or a FIFO)
after ingest is a 404, checked again at every request; every reply has a type from an
allow-list, is never sniffed, and is sandboxed, so an ingested HTML page runs no script in
Chromium. The manifest is not trusted either (issue 41): a file is served only with the size and
SHA-256 ingest recorded, hashed once per version of the file, and never from the index folder."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.loopback import uvicorn_serving
from support.marks import BROWSER
from support.paths import DOCUMENTS

import crag
from crag.app.server import build_server
from crag.app.server.routes import files
from crag.app.server.routes.files import NOT_FOUND, byte_range, headers_for
from crag.index.layout import live_version
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


def test_a_manifest_edited_to_name_another_file_serves_nothing(tmp_path: Path) -> None:
    """After a restart, an edited manifest names a secret outside (with its size), a file in the
    index folder (with its true size and hash) and a file with no hash: all are 404 as missing."""
    docs, secret = tmp_path / "docs", tmp_path / "shadow"
    docs.mkdir()
    (docs / "notes.md").write_text("# Notes\n\nThe inverter's fan starts at 60 degrees.\n")
    secret.write_text("root:$6$not-yours:19000:0:99999:7:::\n")
    crag.ingest([docs], tmp_path / "index")
    keys = tmp_path / "index" / "private.json"  # as the index's own keys.json would be
    keys.write_text('{"keys": "not-yours"}')
    manifest_file = live_version(tmp_path / "index") / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    (ingested,) = manifest["files"].values()
    manifest["files"][str(secret)] = {**ingested, "size": secret.stat().st_size}
    manifest["files"][str(keys)] = {**ingested, "size": keys.stat().st_size,
                                    "sha256": hashlib.sha256(keys.read_bytes()).hexdigest()}
    manifest["files"][str(tmp_path / "bare.md")] = {"mtime_ns": 0}
    (tmp_path / "bare.md").write_text("not-yours")
    manifest_file.write_text(json.dumps(manifest))
    settings = crag.Settings.load(env={}, index={"path": tmp_path / "index"},
                                  server={"store": str(tmp_path / "server.db")})
    with uvicorn_serving(build_server(settings).app) as base:
        assert httpx.get(base + link(docs / "notes.md")).status_code == 200  # what was ingested still is
        for planted in (secret, keys, tmp_path / "bare.md"):
            reply = httpx.get(base + link(planted))
            assert reply.status_code == 404 and reply.json() == NOT_FOUND, planted
            assert b"not-yours" not in reply.content


def test_a_file_edited_since_its_ingest_is_not_served(corpus: Path, url: str) -> None:
    notes = corpus / "docs" / "sub" / "notes.md"
    original = notes.read_bytes()
    try:
        notes.write_bytes(original.replace(b"60", b"99"))  # the same size: only its hash tells
        reply = httpx.get(url + link(notes))
        assert reply.status_code == 404 and reply.json() == NOT_FOUND
    finally:
        notes.write_bytes(original)
    assert httpx.get(url + link(notes)).content == original  # as ingested again: served again


def test_a_file_is_hashed_once_until_it_changes(corpus: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[int] = []

    def counted(fd: int) -> str | None:
        hashed.append(fd)
        return sha256_of(fd)

    sha256_of = files.sha256_of
    monkeypatch.setattr(files, "sha256_of", counted)
    pdf = corpus / "docs" / "handbook.pdf"
    os.utime(pdf)  # a version of it this server has not seen (its ctime moves)
    replies: list[httpx.Response] = []
    asking = [threading.Thread(target=lambda: replies.append(httpx.get(url + link(pdf), timeout=30)))
              for _ in range(8)]
    for thread in asking:  # at once: a viewer asks for several ranges of a large PDF together
        thread.start()
    for thread in asking:
        thread.join()
    replies.append(httpx.get(url + link(pdf), headers={"Range": "bytes=0-9"}))
    assert [r.status_code for r in replies] == [200] * 8 + [206]
    assert len(hashed) == 1
    os.utime(pdf, ns=(pdf.stat().st_atime_ns, pdf.stat().st_mtime_ns))  # mtime set back: ctime still moves
    assert httpx.get(url + link(pdf)).content == pdf.read_bytes()
    assert len(hashed) == 2
