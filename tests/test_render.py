"""`crag.render`: the offline HTML drawing and the Mermaid text of a workflow's graph."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

from workflows import Workflow, step
from workflows.events import Event, StartEvent, StopEvent
from workflows.representation import get_workflow_representation

from crag import CorrectiveRAGWorkflow
from crag.render import graph_html, layout, mermaid

STEPS = ["retrieve", "grade", "refine_internal", "rewrite", "web_search", "refine_web", "synthesize"]
EVENTS = [
    "QueryStartEvent", "RetrievedEvent", "RefineInternalEvent", "RewriteQueryEvent",
    "WebResultsEvent", "InternalKnowledgeEvent", "WebKnowledgeEvent", "StopEvent",
]


class _Text(HTMLParser):
    """Collects the text a reader sees: element content, not attributes, tooltips or styles."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.hidden += tag in ("title", "style", "script")

    def handle_endtag(self, tag: str) -> None:
        self.hidden -= tag in ("title", "style", "script")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.chunks.append(data.strip())


def visible_text(page: str) -> set[str]:
    parser = _Text()
    parser.feed(page)
    parser.close()
    return {c for c in parser.chunks if c}


def test_page_shows_every_step_and_event_as_text() -> None:
    shown = visible_text(graph_html(CorrectiveRAGWorkflow))
    assert set(STEPS + EVENTS) <= shown
    # Whatever the workflow declares today is drawn too, not only the names listed above.
    assert {n.label for n in get_workflow_representation(CorrectiveRAGWorkflow).nodes} <= shown


def test_page_is_self_contained() -> None:
    page = graph_html(CorrectiveRAGWorkflow, title="CRAG <flows>")
    for remote in ('src="http', "src='http", 'href="http', "href='http", "@import", "url(http", "//cdn"):
        assert remote not in page.lower()
    assert "<script" not in page.lower()  # nothing to run, so it renders with JS off too
    assert "<title>CRAG &lt;flows&gt;</title>" in page


def test_page_parses_and_svg_is_xml() -> None:
    page = graph_html(CorrectiveRAGWorkflow)
    HTMLParser().feed(page)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    root = ET.fromstring(re.search(r"<svg\b.*</svg>", page, re.S).group(0))
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg"
    _, _, width, height = map(float, root.get("viewBox").split())
    labels = [t for t in root.iter(f"{ns}text") if t.get("text-anchor") == "middle"]
    assert len(labels) == len(get_workflow_representation(CorrectiveRAGWorkflow).nodes)
    for t in labels:  # every label inside the drawing
        assert 0 < float(t.get("x")) < width and 0 < float(t.get("y")) < height
    # A step's docstring is its tooltip.
    tips = [t.text for t in root.iter(f"{ns}title")]
    assert "Score every chunk and decide Correct, Incorrect or Ambiguous." in tips
    assert len(list(root.iter(f"{ns}path"))) > len(get_workflow_representation(CorrectiveRAGWorkflow).edges)


def test_boxes_fit_their_labels_and_do_not_overlap() -> None:
    lay = layout(get_workflow_representation(CorrectiveRAGWorkflow))
    for row in lay.layers:
        boxes = sorted((lay.nodes[v] for v in row), key=lambda n: n.x)
        for a, b in zip(boxes, boxes[1:]):
            assert a.x + a.w / 2 < b.x - b.w / 2
    for n in lay.nodes.values():
        assert n.w >= 7.9 * len(n.label) and n.x + n.w / 2 <= lay.width


def test_layers_run_from_the_start_event_to_the_stop_event() -> None:
    lay = layout(get_workflow_representation(CorrectiveRAGWorkflow))
    assert lay.layers[0] == ["QueryStartEvent"]
    assert lay.layers[-1] == ["StopEvent"]
    layer = {v: i for i, row in enumerate(lay.layers) for v in row}
    for e in lay.edges:  # no loops in CRAG: every edge points down
        assert layer[e.source] < layer[e.target] and not e.back


def test_mermaid_has_one_arrow_per_edge_and_names_every_step() -> None:
    text = mermaid(CorrectiveRAGWorkflow)
    graph = get_workflow_representation(CorrectiveRAGWorkflow)
    assert text.startswith("flowchart TD\n")
    assert sum("-->" in line for line in text.splitlines()) == len(graph.edges)
    for name in STEPS + EVENTS:
        assert f'"{name}"' in text
    assert "ev_QueryStartEvent --> step_retrieve" in text


class Draft(Event):
    text: str


class TwoSteps(Workflow):
    """Write a draft, then stop with it."""

    @step
    async def write(self, ev: StartEvent) -> Draft:
        """Write something."""
        return Draft(text="hello")

    @step
    async def finish(self, ev: Draft) -> StopEvent:
        return StopEvent(result=ev.text)


class Loop(Workflow):
    @step
    async def work(self, ev: StartEvent | Draft) -> Draft | StopEvent:
        return StopEvent()


def test_a_user_workflow_draws_too() -> None:
    page = graph_html(TwoSteps(), title="two")
    assert {"write", "finish", "StartEvent", "Draft", "StopEvent"} <= visible_text(page)
    assert "Write something." in page
    lay = layout(get_workflow_representation(TwoSteps))
    assert lay.layers == [["StartEvent"], ["write"], ["Draft"], ["finish"], ["StopEvent"]]
    assert mermaid(TwoSteps).count("-->") == 4


def test_a_loop_draws_as_a_back_edge() -> None:
    lay = layout(get_workflow_representation(Loop))
    assert [e for e in lay.edges if e.back] and "StopEvent" in lay.layers[-1]
    ET.fromstring(re.search(r"<svg\b.*</svg>", graph_html(Loop), re.S).group(0))
