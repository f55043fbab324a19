"""Mermaid `flowchart TD` text of a workflow's graph, optionally with one run's path on it."""

from __future__ import annotations

import re

from workflows import Workflow

from crag.app.render.layout import STYLE, graph_of, layout, to_node
from crag.app.render.overlay import run_path, seconds
from crag.app.render.svg import DIM, EDGE, MARK
from crag.trace import RunTrace


def _quoted(label: str) -> str:
    return label.replace('"', "#quot;")


def mermaid(workflow: Workflow | type[Workflow], trace: RunTrace | None = None) -> str:
    """Mermaid text of the same graph: one `-->` line per edge, read top down.

    With a `trace`, the steps that ran carry their time and calls, the run's path is drawn
    thick and blue, what it did not touch is grey, and a front-matter title gives the verdict.
    """
    graph = graph_of(workflow)
    notes, hl = run_path(graph, trace) if trace is not None else ({}, None)
    rank = {v: i for i, v in enumerate(v for row in layout(graph).layers for v in row)}
    # Prefixed ids: a step and an event may share a name, and none is a keyword like `end`.
    prefix = {"step": "step_", "event": "ev_"}
    ids = {n.id: prefix.get(n.node_type, "n_") + re.sub(r"\W", "_", n.id, flags=re.A)
           for n in graph.nodes}
    shape = {"step": '["{}"]', "resource": '[("{}")]', "external": '[/"{}"/]'}
    lines, classes = ["flowchart TD"], {}  # classes: those used, in order of first use
    if trace is not None:
        title = f"{trace.verdict or 'no verdict'} in {seconds(trace.seconds)}: {trace.query}"
        title = title.replace("\\", "/").replace('"', "'")  # safe inside YAML's double quotes
        lines[:0] = ["---", f'title: "{title}"', "---"]
    for n in sorted(graph.nodes, key=lambda n: rank[n.id]):
        kind = to_node(n).kind
        box = shape.get(kind, '(["{}"])')  # events: pills
        label = _quoted(n.label) + (f"<br/>{_quoted(notes[n.id])}" if n.id in notes else "")
        if hl is not None and n.id not in hl.nodes:
            kind = "dim"
        elif hl is not None and n.id in hl.marks:
            kind = hl.marks[n.id]
        classes[kind] = None
        lines.append(f"    {ids[n.id]}{box.format(label)}:::{kind}")
    edges = sorted(graph.edges, key=lambda e: (rank.get(e.source, -1), rank.get(e.target, -1)))
    for e in edges:
        arrow = f'-->|"{_quoted(e.label)}"|' if e.label else "-->"
        lines.append(f"    {ids.get(e.source, e.source)} {arrow} {ids.get(e.target, e.target)}")
    colours = {k: STYLE[k][:3] for k in STYLE} | {"dim": DIM}
    colours |= {k: (STYLE["step"][0], c, STYLE["step"][2]) for k, c in MARK.items()}
    lines += [f"    classDef {k} fill:{colours[k][0]},stroke:{colours[k][1]},color:{colours[k][2]}"
              for k in classes]
    if hl is not None:
        for state, on in (("lit", True), ("dim", False)):
            picked = ",".join(str(i) for i, e in enumerate(edges)
                              if ((e.source, e.target) in hl.edges) == on)
            stroke, width, _ = EDGE[state]
            if picked:
                lines.append(f"    linkStyle {picked} stroke:{stroke},stroke-width:{width}px")
    return "\n".join(lines) + "\n"
