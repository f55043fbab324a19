"""The live page on a server of two collections, in Chromium (as test_live_page.py): a key that
may ask both picks one, and each recent run names its collection; a key of one collection sees
the page as a one-collection server shows it, and none of the other collection's runs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from support.loopback import uvicorn_serving
from support.marks import BROWSER
from support.secret_collections import (
    DEFAULT_QUESTION,
    HR_FILE,
    HR_QUESTION,
    key_for,
    secret_settings,
)

from crag.app.server import build_server

pytestmark = BROWSER
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
DONE = "() => window.cragLive.done"


@dataclass(frozen=True)
class Served:
    url: str
    both: str  # a key that may ask "default" and "hr"
    hr: str  # a key that may ask "hr" only


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("live-collections")
    settings = secret_settings(tmp)
    both, hr = key_for(settings, "both", ["default", "hr"]), key_for(settings, "hr-bot", ["hr"])
    with uvicorn_serving(build_server(settings).app) as url:
        yield Served(url, both, hr)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        yield chromium
        chromium.close()


def until(page: object, script: str, timeout: float = 30.0) -> object:
    """Poll `script` in the page until it is truthy (the page's CSP forbids `eval`)."""
    deadline = time.monotonic() + timeout
    while not (value := page.evaluate(script)):
        assert time.monotonic() < deadline, f"timed out waiting for: {script}"
        page.wait_for_timeout(15)
    return value


def opened_with(browser: object, url: str, key: str) -> object:
    page = browser.new_page()
    page.goto(url + "/")
    page.wait_for_selector("#key-form", state="visible")
    page.fill("#key", key)
    page.click("#key-form button")
    return page


def asked(page: object, question: str) -> str:
    page.fill("#question", question)
    page.click("#ask-button")
    until(page, DONE)
    return page.evaluate("window.cragLive.handler")


def test_a_key_of_two_collections_picks_one_and_sees_which_each_run_asked(browser: object, served: Served) -> None:
    page = opened_with(browser, served.url, served.both)
    page.wait_for_selector("#collection", state="visible")
    options = page.evaluate("Array.from(document.querySelectorAll('#collection option'), o => [o.value, o.text])")
    assert options == [["crag", "default"], ["crag:hr", "hr"]]
    page.select_option("#collection", "crag:hr")
    hr_run = asked(page, HR_QUESTION)
    page.select_option("#collection", "crag")
    default_run = asked(page, DEFAULT_QUESTION)

    auth = {"Authorization": f"Bearer {served.both}"}
    assert httpx.get(f"{served.url}/handlers/{hr_run}", headers=auth).json()["workflow_name"] == "crag:hr"
    assert httpx.get(f"{served.url}/handlers/{default_run}", headers=auth).json()["workflow_name"] == "crag"
    for run, collection in ((hr_run, "hr"), (default_run, "default")):
        row = page.locator("#runs li", has=page.locator(f'a[href="/handlers/{run}/trace"]'))
        assert row.locator(".collection-tag").inner_text() == f" · {collection}"
    page.close()


def test_a_key_of_one_collection_sees_no_picker_and_none_of_the_others_runs(browser: object, served: Served) -> None:
    theirs = httpx.post(f"{served.url}/workflows/crag/run", json={"start_event": {"query": DEFAULT_QUESTION}},
                        headers={"Authorization": f"Bearer {served.both}"}, timeout=60).json()["handler_id"]
    page = opened_with(browser, served.url, served.hr)
    until(page, "() => window.cragLive.models.length === 1")
    assert page.locator("#collection").is_hidden()
    run = asked(page, HR_QUESTION)  # started in its one collection, though it is not the default
    assert HR_FILE in page.inner_text("#result")
    until(page, f"() => document.querySelector('#runs a[href=\"/handlers/{run}/trace\"]')")
    listed = page.evaluate("Array.from(document.querySelectorAll('#runs a'), a => a.getAttribute('href'))")
    assert f"/handlers/{theirs}/trace" not in listed and DEFAULT_QUESTION not in page.inner_text("#runs")
    assert page.locator("#runs .collection-tag").count() == 0  # one collection: as a one-collection server
    page.close()

