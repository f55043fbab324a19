"""A link drawn from a document points only at a web page or at crag serve's own /files copy
(issue 32): a source whose `url` is `javascript:` (an ingested .jsonl, the local web corpus) is
named, not linked, on the live page, the trace page and in a notebook; and the live page's
Content-Security-Policy runs no `javascript:` link even if one got through (Chromium)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.loopback import uvicorn_serving
from support.marks import BROWSER
from support.paths import SAMPLES

from crag import CorrectiveRAGWorkflow, Settings, build_workflow
from crag.app.render import trace_html
from crag.app.render.explain import explanation_html, file_page_link, why_html
from crag.app.render.live import live_html
from crag.app.render.notebook import run_html
from crag.app.server import build_server
from crag.trace import Explanation, SourceLine

INCORRECT = "Who invented the lithium-ion battery?"  # the handbook cannot say: the web is cited
SAFE = re.compile(r"#crag-source-\d+|https?://[^\s\x00-\x1f\x7f\\]+|/files/[0-9a-f]+(#page=[\w%.~-]*)?")
SCHEMES = ["javascript", "vbscript", "data", "file", "blob", "filesystem"]
PAYLOAD = "window.ran=1//https://example.org/"


@st.composite
def hostile_urls(draw: st.DrawFn) -> str:
    """A URL that runs script or leaves the web, as a browser would still read it: any case,
    blanks and controls before it, tabs and newlines inside its scheme (browsers drop them)."""
    scheme = "".join(c.upper() if draw(st.booleans()) else c for c in draw(st.sampled_from(SCHEMES)))
    cut = draw(st.integers(0, len(scheme)))
    inside = draw(st.sampled_from(["", "\t", "\n", "\r"]))
    before = draw(st.text(alphabet=" \t\n\x00\x01\x1b\x0c", max_size=3))
    return before + scheme[:cut] + inside + scheme[cut:] + ":" + PAYLOAD


def hrefs(html: str) -> list[str]:
    return [unescape(h) for h in re.findall(r'href="([^"]*)"', html)]


def explained(url: str, *, file_id: str | None = None, page: str | None = None) -> Explanation:
    sources = [SourceLine(number=1, kind="web", id="w", title="Lithium-ion history", url=url),
               SourceLine(number=2, kind="internal", id="i", file="notes.pdf", file_id=file_id, page=page)]
    return Explanation(verdict="incorrect", rule="Incorrect.", upper=0.7, lower=0.3,
                       answer="Goodenough [1], see [2].", sources=sources)


@given(hostile_urls())
def test_a_source_url_that_is_not_a_web_page_is_named_not_linked(url: str) -> None:
    html = explanation_html(explained(url), link=file_page_link)
    assert all(SAFE.fullmatch(h) for h in hrefs(html)), hrefs(html)
    assert "Lithium-ion history" in html  # still named


@given(st.text(max_size=12))
def test_a_cited_page_stays_inside_its_files_link(page: str) -> None:
    html = why_html(explained("https://example.org/li-ion", file_id="0123abcd", page=page or None),
                    file_page_link)
    assert all(SAFE.fullmatch(h) for h in hrefs(html)), hrefs(html)
    assert 'href="https://example.org/li-ion"' in html and 'href="/files/0123abcd' in html


def hostile_web(tmp: Path) -> Path:
    """The sample web corpus, every page's url replaced by a `javascript:` one."""
    lines = (SAMPLES / "web.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    urls = ["javascript:window.ran='plain'", " JavaScript:window.ran='spaced'", "java\tscript:window.ran='tab'",
            "\x01javascript:window.ran='control'", "data:text/html,<script>opener.ran='data'</script>"]
    for i, record in enumerate(records):
        record["url"] = urls[i % len(urls)]
    (tmp / "web.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return tmp / "web.jsonl"


@pytest.fixture(scope="module")
def hostile_settings(sample_index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tmp = tmp_path_factory.mktemp("hostile-web")
    return Settings.load(env={}, index={"path": sample_index_dir}, web_search={"corpus": hostile_web(tmp)},
                         server={"store": str(tmp / "server.db")})


def test_the_trace_page_and_the_notebook_link_no_hostile_url(hostile_settings: Settings) -> None:
    result = build_workflow(hostile_settings).ask(INCORRECT)
    assert any(s.url and "script" in s.url for s in result.sources)  # the web was cited
    for html in (trace_html(CorrectiveRAGWorkflow, result.trace, link=file_page_link), run_html(result)):
        assert all(SAFE.fullmatch(h) for h in hrefs(html)), hrefs(html)


def test_the_live_page_allows_its_own_script_only() -> None:
    csp = re.search(r'Content-Security-Policy" content="([^"]*)"', live_html(CorrectiveRAGWorkflow)).group(1)
    script = re.search(r"script-src ([^;]*)", csp).group(1)
    assert "'unsafe-inline'" not in script and script.startswith("'sha256-")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                              args=["--headless", "--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


def done(page: object, within: float = 30.0) -> None:
    """Wait for the live page's run to end (polled: the page's policy forbids an eval'd wait)."""
    deadline = time.monotonic() + within
    while not page.evaluate("window.cragLive.done"):
        assert time.monotonic() < deadline, "the run did not end"
        page.wait_for_timeout(15)


@BROWSER[0]
@BROWSER[1]
def test_on_the_live_page_no_source_link_runs_script(browser: object, hostile_settings: Settings) -> None:
    with uvicorn_serving(build_server(hostile_settings).app) as url:
        page = browser.new_page()
        page.goto(url + "/")
        page.fill("#question", INCORRECT)
        page.click("#ask-button")
        done(page)  # the page's own script runs
        drawn = page.eval_on_selector_all("#result a", "links => links.map(a => a.getAttribute('href'))")
        assert drawn and all(SAFE.fullmatch(h) for h in drawn), drawn
        # Were one to get through, the page's policy runs no `javascript:` link all the same.
        page.evaluate("""() => { const a = document.createElement('a'); a.id = 'forged';
            a.href = "javascript:window.ran='forged'"; a.textContent = 'forged';
            document.getElementById('result').append(a); }""")
        page.click("#forged")
        page.click("#ask-button")  # a run of the page's own: the link had its chance before it ends
        done(page)
        assert page.evaluate("window.ran") is None
        page.close()
