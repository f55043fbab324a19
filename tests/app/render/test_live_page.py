"""`crag serve`'s live page in a real browser: Playwright driving Debian's Chromium against a real
server over loopback. The steps light up in the run's order, an Ambiguous run shows both of its
branches running at once, and the answer, its sources and the recent runs appear.

Skipped only where /usr/bin/chromium is missing; `.ci/run` installs it (never `playwright install`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.loopback import uvicorn_serving
from support.marks import BROWSER
from support.paths import SAMPLES

from crag import Settings, build_workflow
from crag.app.server import build_server
from crag.events import CragResult
from crag.steps.grading.learned import shipped_model

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = BROWSER
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
AMBIGUOUS = "What cathode does the Helio H10 battery use?"  # the handbook half-answers it
CORRECT = "What warranty does Lumen give on the Helio H10?"
SLOW = 0.5  # seconds the refiner and the web search take here, so the two branches overlap visibly


class Slow:
    """Delays a component's one async method, to watch concurrent steps in the browser."""

    def __init__(self, inner: object, method: str) -> None:
        self.inner, self.method = inner, method

    def __getattr__(self, name: str) -> object:
        if name != self.method:
            return getattr(self.inner, name)

        async def slowly(*args: object) -> object:
            await asyncio.sleep(SLOW)
            return await getattr(self.inner, name)(*args)

        return slowly


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield chromium
        chromium.close()


def serving(index_dir: Path, tmp: Path, **server: object) -> Iterator[str]:
    """A server on the sample index and web, its refiner and search slowed (`Slow`), under
    uvicorn on a free loopback port; yields the base URL."""
    settings = Settings.load(env={}, index={"path": index_dir}, web_search={"corpus": SAMPLES / "web.jsonl"},
                             server={"store": str(tmp / "server.db"), **server})
    workflow = build_workflow(settings)
    workflow.refiner = Slow(workflow.refiner, "refine")
    workflow.searcher = Slow(workflow.searcher, "search")
    with uvicorn_serving(build_server(settings, workflow=workflow).app) as url:
        yield url


@pytest.fixture(scope="module")
def base_url(sample_index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serving(sample_index_dir, tmp_path_factory.mktemp("live"))


def until(page: object, script: str, timeout: float = 30.0) -> object:
    """Poll `script` in the page until it is truthy (page.wait_for_function would `eval` it,
    which the page's Content-Security-Policy forbids, rightly)."""
    deadline = time.monotonic() + timeout
    while not (value := page.evaluate(script)):
        assert time.monotonic() < deadline, f"timed out waiting for: {script}"
        page.wait_for_timeout(15)
    return value


BOTH_RUNNING = """() => ['refine_internal', 'web_search'].every(id =>
    document.querySelector(`.live .node[data-id="${id}"]`).classList.contains('running'))"""
DONE = "() => window.cragLive.done"


def test_an_ambiguous_run_lights_up_in_order_both_branches_at_once_then_explains_itself(
    browser: object, base_url: str
) -> None:
    page = browser.new_page()
    page.goto(base_url + "/")
    assert page.title() == "crag, live"
    assert page.locator("#key-form").is_hidden()  # no key on this server: none asked for
    page.fill("#question", AMBIGUOUS)
    page.click("#ask-button")
    # Both branches of the Ambiguous verdict are lit and running at the same moment.
    until(page, BOTH_RUNNING)
    until(page, DONE)

    handler = page.evaluate("window.cragLive.handler")
    body = httpx.get(f"{base_url}/handlers/{handler}").json()
    result = CragResult.model_validate(body["result"]["value"]["result"])
    assert result.verdict.value == "ambiguous"
    run_order = [r.name for r in sorted(result.trace.steps, key=lambda r: r.started)]
    lit = page.evaluate("""() => Array.from(document.querySelectorAll('.live .node.step.on'))
        .sort((a, b) => a.dataset.order - b.dataset.order).map(n => n.dataset.id)""")
    assert lit == page.evaluate("window.cragLive.order") == run_order
    assert sorted(page.evaluate("window.cragLive.finished")) == sorted(result.steps)
    # Every step that ran shows its time; every step is done, none still running.
    notes = page.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll(
        '.live .node.step.on')).map(n => [n.dataset.id, n.querySelector('text.note').textContent]))""")
    assert set(notes) == set(run_order) and all(" ms" in t or " s" in t for t in notes.values())
    assert notes["web_search"].endswith("1 search")
    assert page.locator(".live .node.running").count() == 0
    # The stop event and both paths into the hop step are lit; the explanation follows.
    assert page.locator('.live .node.on[data-id="StopEvent"]').count() == 1
    assert page.locator('.live path.edge.on[data-edge="InternalKnowledgeEvent hop"]').count() == 1
    assert page.locator('.live path.edge.on[data-edge="WebKnowledgeEvent hop"]').count() == 1
    assert page.locator('.live path.edge.on[data-edge="KnowledgeEvent synthesize"]').count() == 1
    why = page.inner_text("#result .why")
    assert why.startswith("Why: Ambiguous:") and f"lower threshold {shipped_model().lower:g}" in why
    assert page.inner_text("#result .answer") == result.answer
    # Before the explanation came, the answer grew in place, one streamed piece at a time.
    grown = page.evaluate("window.cragLive.grown")
    assert len(grown) >= 2 and grown[-1] == result.answer
    assert all(later.startswith(earlier) and later != earlier for earlier, later in zip(grown, grown[1:]))
    sources = page.locator("#result .sources li")
    assert sources.count() == len(result.sources) > 0
    assert {"web", "internal"} <= {s.kind for s in result.sources}
    cited = page.locator('#result .answer a[href^="#crag-source-"]')
    assert cited.count() > 0
    assert page.locator("#result svg.grades rect.grade").count() == len(result.grades)
    page.close()


def test_recent_runs_link_to_their_trace_pages(browser: object, base_url: str) -> None:
    page = browser.new_page()
    page.goto(base_url + "/")
    page.fill("#question", CORRECT)
    page.click("#ask-button")
    until(page, DONE)
    handler = page.evaluate("window.cragLive.handler")
    link = page.locator(f'#runs a[href="/handlers/{handler}/trace"]')
    assert link.inner_text() == CORRECT
    link.click()
    page.wait_for_url(f"**/handlers/{handler}/trace")
    assert page.inner_text(".why").startswith("Why: Correct:")
    assert page.locator("svg.grades line.threshold").count() == 2
    page.close()


def test_with_an_api_key_the_page_asks_for_it_and_keeps_it_in_the_tab(
    browser: object, sample_index_dir: Path, tmp_path: Path
) -> None:
    key = "live-page-key-9f2c"
    for url in serving(sample_index_dir, tmp_path, api_key=key):
        page = browser.new_page()
        page.goto(url + "/")  # open: the page itself holds no secret
        page.wait_for_selector("#key-form", state="visible")  # the runs list needed the key
        page.fill("#key", key)
        page.click("#key-form button")
        page.fill("#question", CORRECT)
        page.click("#ask-button")
        until(page, DONE)
        assert "12-year" in page.inner_text("#result .answer")
        assert page.evaluate("sessionStorage.getItem('crag-api-key')") == key
        assert page.evaluate("localStorage.length") == 0 and key not in page.url
        assert httpx.get(f"{url}/handlers").status_code == 401
        page.close()
