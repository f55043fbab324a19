"""Regenerate the README's pictures: `.venv/bin/python docs/make_screenshots.py`.

docs/trace.png is one run, explained; docs/live.png is `crag serve`'s live page after a run.

It asks the sample handbook a question it cannot answer, with a stand-in chat model that takes
50 ms a call (crag.testing.FakeLLM; no network, no keys) as grader, rewriter and synthesizer,
so the picture shows LLM calls on the steps and the rewrite overlapping grading. It draws the
run's trace with `crag.app.render.trace_html` and screenshots the page in headless Chromium with
the network off (Debian: apt-get install chromium). For the live page it serves the same workflow
on a loopback port and asks the question through the page itself, with Playwright driving
/usr/bin/chromium (`pip install playwright`; never `playwright install`).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from PIL import Image, ImageChops  # noqa: E402

import crag  # noqa: E402
from crag import ChunkIndex, Settings, build_workflow, ingest  # noqa: E402
from crag.app.render import trace_html  # noqa: E402
from crag.app.render.browser import render  # noqa: E402
from crag.steps.grading import LexicalEvaluator, LLMGrader  # noqa: E402
from crag.steps.rewriting import LLMRewriter  # noqa: E402
from crag.steps.synthesis import LLMSynthesizer  # noqa: E402
from crag.testing import FakeLLM  # noqa: E402

DOCS = Path(__file__).resolve().parent
SAMPLES = Path(crag.__file__).parent / "sample_data"
QUESTION = "Who invented the lithium-ion battery?"


def reply(prompt: str) -> str:
    if "Rate how relevant" in prompt:
        return "2"  # the handbook is about a home battery, not its history
    if "web search query" in prompt:
        return "lithium-ion battery inventors"
    return "John Goodenough, M. Stanley Whittingham and Akira Yoshino developed it [1]."


def crop(png: Path, margin: int = 16) -> None:
    """Trim the white below and beside the page, keep a margin, and store it compactly."""
    image = Image.open(png).convert("RGB")
    box = ImageChops.difference(image, Image.new("RGB", image.size, "white")).getbbox()
    left, top, right, bottom = box
    image = image.crop((max(left - margin, 0), max(top - margin, 0),
                        min(right + margin, image.width), min(bottom + margin, image.height)))
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(png, optimize=True)


def live_screenshot(settings: Settings, workflow: object, png: Path) -> None:
    """Serve `workflow`, ask QUESTION on the live page in Chromium, screenshot the page."""
    import uvicorn
    from playwright.sync_api import sync_playwright

    from crag.app.server import build_server

    server = uvicorn.Server(uvicorn.Config(build_server(settings, workflow=workflow).app,
                                           host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=[
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"])
            page = browser.new_page(viewport={"width": 1400, "height": 1300})
            page.goto(url)
            page.fill("#question", QUESTION)
            page.click("#ask-button")
            while not page.evaluate("() => window.cragLive.done"):
                page.wait_for_timeout(50)
            page.screenshot(path=str(png), full_page=True)
            browser.close()
    finally:
        server.should_exit = True
        thread.join(30)
    crop(png)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        index_dir = Path(tmp) / "index"
        ingest([SAMPLES / "docs"], index_dir)
        settings = Settings.load(env={}, index={"path": index_dir}, web_search={"corpus": SAMPLES / "web.jsonl"},
                                 server={"store": str(Path(tmp) / "server.db")})
        llm = FakeLLM(reply=reply, latency=0.05)
        evaluator = LexicalEvaluator(ChunkIndex.load(index_dir).term_stats)

        def with_fake_llm() -> crag.CorrectiveRAGWorkflow:
            return build_workflow(settings, grader=LLMGrader(llm, fallback=evaluator),
                                  rewriter=LLMRewriter(llm), synthesizer=LLMSynthesizer(llm))

        workflow = with_fake_llm()
        workflow.ask("What warranty does Lumen give on the Helio H10?")  # warm up: loads, first calls
        result = workflow.ask(QUESTION)
        page = Path(tmp) / "trace.html"
        page.write_text(trace_html(workflow, result.trace, title="crag run, with a 50 ms stand-in chat model"),
                        encoding="utf-8")
        png = DOCS / "trace.png"
        render(page, png, width=1300, height=2600)  # cropped to what was drawn
        crop(png)
        print(f"wrote {png} ({png.stat().st_size // 1024} KB): {result.verdict.value}, "
              f"{result.trace.llm_calls} LLM calls, {result.trace.seconds * 1000:.0f} ms")
        live = DOCS / "live.png"
        live_screenshot(settings, with_fake_llm(), live)  # a served workflow must not have run
        print(f"wrote {live} ({live.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
