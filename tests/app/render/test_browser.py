"""The drawn pages in a real browser: headless Chromium, network off, renders the graph.

Skipped only where no Chromium exists; `.ci/run` installs Debian's `chromium`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from PIL import Image
from support.marks import BROWSER
from support.pages import visible_text
from support.paths import SAMPLES
from support.workflow import ALL_STEPS, EVENTS

from crag import CorrectiveRAGWorkflow, Settings, build_workflow
from crag.app.render import graph_html, trace_html
from crag.app.render.browser import Rendered, render

pytestmark = BROWSER

WHITE = (255, 255, 255)
BADGE_INCORRECT, TIMELINE_BAR, EDGE_GREY, STEP_FILL = (185, 28, 28), (59, 130, 246), (100, 116, 139), (219, 234, 254)


@pytest.fixture(scope="module")
def shown(tmp_path_factory: pytest.TempPathFactory, sample_index_dir: Path) -> dict[str, Rendered]:
    """Both pictures, each loaded once in Chromium (concurrently): all flows, and one Incorrect run."""
    tmp = tmp_path_factory.mktemp("browser")
    settings = Settings.load(env={}, index={"path": sample_index_dir}, web_search={"corpus": SAMPLES / "web.jsonl"})
    result = build_workflow(settings).ask("Who invented the lithium-ion battery?")
    (tmp / "graph.html").write_text(graph_html(CorrectiveRAGWorkflow), encoding="utf-8")
    (tmp / "trace.html").write_text(trace_html(CorrectiveRAGWorkflow, result.trace), encoding="utf-8")
    with ThreadPoolExecutor(2) as pool:
        jobs = {name: pool.submit(render, tmp / f"{name}.html", tmp / f"{name}.png", width=1300, height=1500)
                for name in ("graph", "trace")}
        return {name: job.result() for name, job in jobs.items()}


def colours(png: Path) -> dict[tuple[int, int, int], int]:
    image = Image.open(png).convert("RGB")
    return {rgb: n for n, rgb in image.getcolors(image.width * image.height)}


def test_all_flows_page_shows_every_step_and_event_in_the_browser(shown: dict[str, Rendered]) -> None:
    assert set(ALL_STEPS + EVENTS) <= visible_text(shown["graph"].dom)


def test_trace_page_shows_the_steps_the_verdict_and_the_timeline(shown: dict[str, Rendered]) -> None:
    text = visible_text(shown["trace"].dom)
    assert set(ALL_STEPS + EVENTS) <= text
    assert {"incorrect", "Timeline", "“Who invented the lithium-ion battery?”"} <= text
    assert any(t.endswith("· 1 search") for t in text)  # web_search's note on its box


@pytest.mark.parametrize("name", ["graph", "trace"])
def test_screenshot_is_not_blank(shown: dict[str, Rendered], name: str) -> None:
    counts = colours(shown[name].screenshot)
    painted = sum(n for rgb, n in counts.items() if rgb != WHITE)
    assert painted > 0.03 * sum(counts.values()), f"only {painted} non-white pixels"
    assert counts.get(STEP_FILL, 0) > 2000  # the step boxes are filled: the SVG was drawn


def test_trace_screenshot_shows_the_verdict_badge_and_timeline_bars(shown: dict[str, Rendered]) -> None:
    trace, graph = colours(shown["trace"].screenshot), colours(shown["graph"].screenshot)
    assert trace.get(BADGE_INCORRECT, 0) > 1000 and trace.get(TIMELINE_BAR, 0) > 100
    assert graph.get(EDGE_GREY, 0) > 200 and graph.get(TIMELINE_BAR, 0) < 10  # all flows: no run
