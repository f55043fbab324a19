"""`crag.app.render`: the offline HTML drawing and the Mermaid text of a workflow's graph, and of one run."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
from support.pages import visible_text
from support.workflow import ALL_STEPS, EVENTS
from workflows import Workflow, step
from workflows.events import Event, StartEvent, StopEvent
from workflows.representation import get_workflow_representation

from crag import CorrectiveRAGWorkflow
from crag.app.render import graph_html, layout, mermaid, run_path, timeline_svg, trace_html
from crag.errors import TraceError
from crag.trace import RunTrace, StepRecord


def test_page_shows_every_step_and_event_as_text() -> None:
    shown = visible_text(graph_html(CorrectiveRAGWorkflow))
    assert set(ALL_STEPS + EVENTS) <= shown
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
    for name in ALL_STEPS + EVENTS:
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


# One run drawn on the graph -------------------------------------------------------------

def record(name: str, inp: str, out: list[str], started: float, ended: float, **calls: int) -> StepRecord:
    return StepRecord(name=name, input_event=inp, output_events=out, started=started, ended=ended, **calls)


# A Correct run with an LLM grader: the rewrite ran speculatively, beside grading; no web search.
CORRECT = RunTrace(query="What warranty does Lumen give?", verdict="correct", seconds=0.120, steps=[
    record("retrieve", "QueryStartEvent", ["RewriteQueryEvent", "CandidatesEvent"], 0.001, 0.010),
    record("postprocess", "CandidatesEvent", ["RetrievedEvent"], 0.010, 0.011),
    record("grade", "RetrievedEvent", ["RefineInternalEvent"], 0.011, 0.070, llm_calls=4,
           prompt_tokens=700, completion_tokens=4),
    record("rewrite", "RewriteQueryEvent", ["RewrittenQueryEvent"], 0.012, 0.060, llm_calls=1),
    record("refine_internal", "RefineInternalEvent", ["InternalKnowledgeEvent"], 0.071, 0.075),
    record("hop", "InternalKnowledgeEvent", ["KnowledgeEvent"], 0.075, 0.076),
    record("synthesize", "KnowledgeEvent", ["StopEvent"], 0.076, 0.119, llm_calls=1),
])
NOT_TAKEN = {"web_search", "refine_web", "WebSearchNeededEvent", "WebResultsEvent", "WebKnowledgeEvent"}


def nodes_by_state(page: str) -> dict[str, set[str]]:
    """Node labels of the graph's SVG, grouped by the state in their class (lit, dim)."""
    root = ET.fromstring(re.search(r"<svg\b.*?</svg>", page, re.S).group(0))
    ns = "{http://www.w3.org/2000/svg}"
    states: dict[str, set[str]] = {"lit": set(), "dim": set()}
    for g in root.iter(f"{ns}g"):
        classes = (g.get("class") or "").split()
        if "node" in classes:
            label = next(t.text for t in g.iter(f"{ns}text") if "note" not in (t.get("class") or ""))
            states["lit" if "lit" in classes else "dim"].add(label)
    return states


def test_trace_lights_the_steps_and_events_of_the_run_and_dims_the_rest() -> None:
    states = nodes_by_state(trace_html(CorrectiveRAGWorkflow, CORRECT))
    assert states["dim"] == NOT_TAKEN
    assert {"retrieve", "postprocess", "grade", "rewrite", "refine_internal", "hop", "synthesize", "QueryStartEvent",
            "CandidatesEvent", "RetrievedEvent", "RewriteQueryEvent", "RewrittenQueryEvent", "StopEvent"} <= states["lit"]


def test_an_edge_is_on_the_path_only_if_the_run_used_it() -> None:
    _, path = run_path(get_workflow_representation(CorrectiveRAGWorkflow), CORRECT)
    assert ("retrieve", "RewriteQueryEvent") in path.edges  # the speculative rewrite came from retrieve,
    assert ("grade", "RewriteQueryEvent") not in path.edges  # not from grade
    assert ("RewrittenQueryEvent", "web_search") not in path.edges  # its result waited for nothing
    assert ("InternalKnowledgeEvent", "hop") in path.edges and ("KnowledgeEvent", "synthesize") in path.edges
    assert ("WebKnowledgeEvent", "hop") not in path.edges


def test_steps_that_ran_show_their_time_calls_and_tokens() -> None:
    notes, _ = run_path(get_workflow_representation(CorrectiveRAGWorkflow), CORRECT)
    assert notes == {
        "retrieve": "9.0 ms", "postprocess": "1.0 ms", "grade": "59 ms · 4 LLM · 704 tok", "rewrite": "48 ms · 1 LLM",
        "refine_internal": "4.0 ms", "hop": "1.0 ms", "synthesize": "43 ms · 1 LLM",
    }
    assert set(notes.values()) <= visible_text(trace_html(CorrectiveRAGWorkflow, CORRECT))


def test_trace_page_shows_the_query_verdict_total_time_and_counts() -> None:
    page = trace_html(CorrectiveRAGWorkflow, CORRECT, title="Run <1>")
    shown = visible_text(page)
    assert {"Run <1>", "“What warranty does Lumen give?”", "correct", "120 ms", "Timeline"} <= shown
    assert "7 of 9 steps ran · 6 LLM calls · 0 web searches · 704 tokens" in " ".join(shown)


def test_timeline_has_a_bar_per_step_and_concurrent_steps_overlap() -> None:
    root = ET.fromstring(timeline_svg(CORRECT))
    bars = {t.text.split(":")[0]: r for r in root.iter("{http://www.w3.org/2000/svg}rect")
            for t in r.iter("{http://www.w3.org/2000/svg}title")}
    ranges = {name: (float(r.get("x")), float(r.get("x")) + float(r.get("width"))) for name, r in bars.items()}
    assert len(bars) == len(CORRECT.steps)
    (g0, g1), (r0, r1) = ranges["grade"], ranges["rewrite"]
    assert g0 < r0 < r1 < g1  # the rewrite ran inside grading's time
    assert ranges["refine_internal"][0] > g1  # refinement waited for the verdict


def test_a_failed_or_degraded_step_is_marked_and_explained() -> None:
    steps = [s.model_copy() for s in CORRECT.steps]
    steps[2].degraded = "2 of 4 grades by a fallback (timeout)"
    steps[6].error = "ValueError: boom"
    page = trace_html(CorrectiveRAGWorkflow, CORRECT.model_copy(update={"steps": steps}))
    assert "⚠ grade: 2 of 4 grades by a fallback (timeout)" in visible_text(page)
    assert "⚠ synthesize: ValueError: boom" in visible_text(page)
    assert 'stroke="#d97706"' in page and 'stroke="#dc2626"' in page


def test_trace_page_is_self_contained_valid_and_needs_no_script() -> None:
    page = trace_html(CorrectiveRAGWorkflow, CORRECT)
    HTMLParser().feed(page)
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    for picture in re.findall(r"<svg\b.*?</svg>", page, re.S):
        ET.fromstring(picture)


def test_a_trace_of_another_workflow_is_refused() -> None:
    other = RunTrace(steps=[record("write", "StartEvent", ["Draft"], 0, 1)])
    with pytest.raises(TraceError, match="write"):
        trace_html(CorrectiveRAGWorkflow, other)
    assert "write" in visible_text(trace_html(TwoSteps, other))  # on its own workflow it draws


def test_mermaid_of_a_run_titles_the_verdict_and_greys_what_it_did_not_take() -> None:
    text = mermaid(CorrectiveRAGWorkflow, CORRECT)
    lines = [line.strip() for line in text.splitlines()]
    assert lines[:3] == ["---", 'title: "correct in 120 ms: What warranty does Lumen give?"', "---"]
    assert lines[3] == "flowchart TD"
    assert 'step_grade["grade<br/>59 ms · 4 LLM · 704 tok"]:::step' in lines
    assert 'step_web_search["web_search"]:::dim' in lines
    arrows = [line for line in lines if "-->" in line]
    lit, dim = (re.search(rf"linkStyle ([\d,]+) stroke:{c}", text).group(1).split(",") for c in ("#1d4ed8", "#cbd5e1"))
    assert sorted(map(int, lit + dim)) == list(range(len(arrows)))
    assert arrows[int(lit[0])] == "ev_QueryStartEvent --> step_retrieve"


def test_a_long_sub_step_name_gives_way_in_the_middle_so_the_timeline_keeps_room_for_bars() -> None:
    from crag.app.render.overlay import LABEL_CHARS, _label

    name = "hop to “History of the lithium-ion battery”: web_search"
    shown = _label(name)
    assert len(shown) == LABEL_CHARS and shown.startswith("hop to “History") and shown.endswith("…: web_search")
    assert _label("retrieve") == "retrieve"
