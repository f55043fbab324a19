"""Regenerate docs/trace.png, the README's picture of one run: `.venv/bin/python docs/make_screenshots.py`.

It asks the sample handbook a question it cannot answer, with a stand-in chat model that takes
50 ms a call (crag.testing.FakeLLM; no network, no keys) as grader, rewriter and synthesizer,
so the picture shows LLM calls on the steps and the rewrite overlapping grading. It draws the
run's trace with `crag.app.render.trace_html` and screenshots the page in headless Chromium with
the network off (Debian: apt-get install chromium).
"""

from __future__ import annotations

import os
import tempfile
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


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        index_dir = Path(tmp) / "index"
        ingest([SAMPLES / "docs"], index_dir)
        settings = Settings.load(env={}, index={"path": index_dir}, web_search={"corpus": SAMPLES / "web.jsonl"})
        llm = FakeLLM(reply=reply, latency=0.05)
        evaluator = LexicalEvaluator(ChunkIndex.load(index_dir).term_stats)
        workflow = build_workflow(settings, grader=LLMGrader(llm, fallback=evaluator),
                                  rewriter=LLMRewriter(llm), synthesizer=LLMSynthesizer(llm))
        workflow.ask("What warranty does Lumen give on the Helio H10?")  # warm up: loads, first calls
        result = workflow.ask(QUESTION)
        page = Path(tmp) / "trace.html"
        page.write_text(trace_html(workflow, result.trace, title="crag run, with a 50 ms stand-in chat model"),
                        encoding="utf-8")
        png = DOCS / "trace.png"
        render(page, png, width=1300, height=1700)
        crop(png)
        print(f"wrote {png} ({png.stat().st_size // 1024} KB): {result.verdict.value}, "
              f"{result.trace.llm_calls} LLM calls, {result.trace.seconds * 1000:.0f} ms")


if __name__ == "__main__":
    main()
