"""Draw a workflow's graph of possible flows: a self-contained HTML page, or Mermaid text.

Built on the engine's own graph data (`get_workflow_representation`) rather than
llama-index-utils-workflow, whose pyvis page loads vis-network from a CDN and is blank offline.
The page is one inline SVG: no scripts, stylesheets or fonts are fetched from anywhere.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from html import escape
from inspect import cleandoc

from workflows import Workflow
from workflows.representation import WorkflowGraph, WorkflowGraphNode, get_workflow_representation

# Labels are code names in a monospace font, so a box sized by character count always fits them.
FONT, CHAR_W, NODE_H, PAD_X = 13, 7.9, 34, 16
LAYER_GAP, NODE_GAP, DUMMY_GAP, MARGIN, LEGEND_H = 46, 28, 14, 24, 36
MONO = "ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace"
PILLS = ("event", "start", "stop")
STYLE = {  # kind: (fill, stroke, text colour, legend caption)
    "step": ("#dbeafe", "#1d4ed8", "#172554", "step"),
    "event": ("#fef3c7", "#b45309", "#451a03", "event"),
    "start": ("#dcfce7", "#15803d", "#14532d", "start event"),
    "stop": ("#fee2e2", "#b91c1c", "#450a0a", "stop event"),
    "resource": ("#f3e8ff", "#7e22ce", "#3b0764", "resource"),
    "external": ("#f1f5f9", "#475569", "#0f172a", "external"),
}


@dataclass
class Node:
    id: str
    label: str
    kind: str  # a key of STYLE
    tip: str
    w: float
    layer: int = -1
    x: float = 0.0  # centre
    y: float = 0.0  # centre


@dataclass
class Edge:
    source: str
    target: str
    label: str | None
    points: list[tuple[float, float]]  # from the source's border to the target's
    back: bool = False  # closes a loop, so it points upwards


@dataclass
class Layout:
    """A graph placed top to bottom; `layers` holds node ids, first row first."""

    name: str
    description: str | None
    nodes: dict[str, Node]
    layers: list[list[str]]
    edges: list[Edge]
    width: float
    height: float


def _node(n: WorkflowGraphNode) -> Node:
    kind = {"step": "step", "resource": "resource", "resource_config": "resource"}.get(n.node_type)
    tip = getattr(n, "description", None) or getattr(n, "type_name", None) or n.label
    if n.node_type == "event":
        kind = "stop" if n.is_subclass_of("StopEvent") else "event"
        kind = "start" if n.is_subclass_of("StartEvent") else kind
        fields = ", ".join((n.event_schema or {}).get("properties", {})) or "none"
        by = ", ".join(n.produced_by) or "the caller"
        tip = f"{' ← '.join(n.event_types)}\nfields: {fields}\nproduced by: {by}"
    kind = kind or "external"
    pad = NODE_H * 0.4 if kind in PILLS else 0  # pills lose width to their round ends
    return Node(n.id, n.label, kind, tip, len(n.label) * CHAR_W + 2 * PAD_X + pad)


def layout(graph: WorkflowGraph) -> Layout:
    """Layered layout: break cycles, longest-path layers, barycenter order, then x placement."""
    nodes = {n.id: _node(n) for n in graph.nodes}
    kept = [e for e in graph.edges if e.source != e.target and {e.source, e.target} <= set(nodes)]
    succ = defaultdict(list)
    for e in kept:
        succ[e.source].append(e.target)
    # DFS from the start events first, so loops point back up instead of reshaping the main flow.
    targets = {e.target for e in kept}
    roots = sorted(nodes, key=lambda v: (nodes[v].kind != "start", v in targets))
    state: dict[str, int] = {}
    back: set[tuple[str, str]] = set()

    def dfs(v: str) -> None:
        state[v] = 1
        for t in succ[v]:
            if state.get(t) == 1:
                back.add((v, t))
            elif t not in state:
                dfs(t)
        state[v] = 2

    for v in (v for v in roots if v not in state):
        dfs(v)
    dag = [(t, s) if (s, t) in back else (s, t) for s, t in ((e.source, e.target) for e in kept)]
    preds, dsucc = defaultdict(list), defaultdict(list)
    for s, t in dag:
        preds[t].append(s)
        dsucc[s].append(t)

    def depth(v: str) -> int:  # longest path from a source
        if nodes[v].layer < 0:
            nodes[v].layer = max((depth(u) + 1 for u in preds[v]), default=0)
        return nodes[v].layer

    last = max(map(depth, nodes), default=0)
    for v, n in nodes.items():
        if not preds[v] and dsucc[v] and n.kind != "start":  # not at the top: just above its user
            n.layer = min(nodes[t].layer for t in dsucc[v]) - 1
        if n.kind == "stop" and not dsucc[v]:  # the end of a run is always the bottom row
            n.layer = last
    rows: list[list[str]] = [[] for _ in range(last + 1)]
    for v in state:  # DFS discovery order is each row's first order
        rows[nodes[v].layer].append(v)
    width = {v: n.w for v, n in nodes.items()}
    up, down, chains = defaultdict(list), defaultdict(list), []
    for k, (s, t) in enumerate(dag):  # long edges get zero-width dummies to route between boxes
        dummies = [f"\0{k}.{i}" for i in range(nodes[s].layer + 1, nodes[t].layer)]
        for i, d in enumerate(dummies, nodes[s].layer + 1):
            rows[i].append(d)
            width[d] = 0.0
        chains.append([s, *dummies, t])
        for a, b in zip(chains[-1], chains[-1][1:]):
            down[a].append(b)
            up[b].append(a)
    rows = _order(rows, up, down)
    x = _place(rows, up, down, width)
    left = min((x[v] - width[v] / 2 for v in x), default=0.0)
    y = {v: MARGIN + NODE_H / 2 + i * (NODE_H + LAYER_GAP) for i, r in enumerate(rows) for v in r}
    x = {v: x[v] + MARGIN - left for v in x}
    for v, n in nodes.items():
        n.x, n.y = x[v], y[v]
    ports = _ports(nodes, up, down, x)
    edges = []
    for e, (s, t), chain in zip(kept, dag, chains):  # straight through dummy rows, curved between
        pts = [(x[s] + ports[s, chain[1]].pop(), y[s] + NODE_H / 2)]
        pts += [(x[d], y[d] + dy) for d in chain[1:-1] for dy in (-NODE_H / 2, NODE_H / 2)]
        pts.append((x[t] + ports[t, chain[-2]].pop(), y[t] - NODE_H / 2))
        rev = (s, t) != (e.source, e.target)
        edges.append(Edge(e.source, e.target, e.label, pts[::-1] if rev else pts, rev))
    layers = [[v for v in row if v in nodes] for row in rows]
    right = max((x[v] + width[v] / 2 for v in x), default=0.0) + MARGIN
    bottom = max(y.values(), default=0.0) + NODE_H / 2 + MARGIN
    return Layout(graph.name, graph.description, nodes, layers, edges, right, bottom)


def _order(rows: list[list[str]], up: dict, down: dict) -> list[list[str]]:
    """Barycenter sweeps, down then up: sort each row by its neighbours' mean place."""
    for sweep in range(6):
        downwards = sweep % 2 == 0
        for i in range(1, len(rows)) if downwards else range(len(rows) - 2, -1, -1):
            ref, nbrs = (rows[i - 1], up) if downwards else (rows[i + 1], down)
            pos = {v: k for k, v in enumerate(ref)}
            key = {v: sum(map(pos.get, nbrs[v])) / len(nbrs[v]) if nbrs[v] else k
                   for k, v in enumerate(rows[i])}  # a node with no neighbours there stays put
            rows[i].sort(key=key.get)
    return rows


def _place(rows: list[list[str]], up: dict, down: dict, width: dict) -> dict[str, float]:
    """Pull each node to the mean x of its neighbours, keeping the row's order and spacing."""
    def sep(a: str, b: str) -> float:
        return (width[a] + width[b]) / 2 + (NODE_GAP if width[a] and width[b] else DUMMY_GAP)

    x: dict[str, float] = {}
    for row in rows:
        for k, v in enumerate(row):
            x[v] = x[row[k - 1]] + sep(row[k - 1], v) if k else 0.0
    # Sweeps that end downwards leave each node under the mean of its parents,
    # so chains run straight down and a long edge stays one vertical line.
    for sweep in range(7):
        for i in range(len(rows)) if sweep % 2 == 0 else range(len(rows) - 1, -1, -1):
            row, nbrs = rows[i], down if sweep % 2 else up
            want = [sum(map(x.get, nbrs[v])) / len(nbrs[v]) if nbrs[v] else x[v] for v in row]
            lo, hi = want[:], want[:]  # pushed right, pushed left: their mean keeps the spacing too
            for k in range(1, len(row)):
                lo[k] = max(lo[k], lo[k - 1] + sep(row[k - 1], row[k]))
            for k in range(len(row) - 2, -1, -1):
                hi[k] = min(hi[k], hi[k + 1] - sep(row[k], row[k + 1]))
            x.update({v: (lo[k] + hi[k]) / 2 for k, v in enumerate(row)})
    return x


def _ports(nodes: dict[str, Node], up: dict, down: dict, x: dict) -> dict[tuple[str, str], list]:
    """Spread a box's edges over its flat top or bottom instead of meeting in one point."""
    ports: dict[tuple[str, str], list[float]] = defaultdict(list)  # a list: edges may be parallel
    for v, n in nodes.items():
        for nbrs in (up[v], down[v]):
            gap = min(18.0, max(n.w - NODE_H, 0.0) / max(len(nbrs) - 1, 1))
            for k, u in enumerate(sorted(nbrs, key=x.get)):
                ports[v, u].append((k - (len(nbrs) - 1) / 2) * gap)
    return ports


def _box(kind: str, x: float, y: float, w: float, h: float) -> str:
    fill, stroke, _, _ = STYLE[kind]
    rx, line = (h / 2 if kind in PILLS else 7), (2.5 if kind in ("start", "stop") else 1.5)
    dash = ' stroke-dasharray="4 3"' if kind == "external" else ""
    return (f'<rect x="{x - w / 2:.1f}" y="{y - h / 2:.1f}" width="{w:.1f}" height="{h:.1f}" '
            f'rx="{rx:.1f}" fill="{fill}" stroke="{stroke}" stroke-width="{line}"{dash}/>')


def _text(x: float, y: float, text: str, **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}" dominant-baseline="central"{extra}>{escape(text)}</text>'


def _path(pts: list[tuple[float, float]]) -> str:
    d = f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        m = (y0 + y1) / 2  # vertical tangents at both ends: S-curves that leave and enter upright
        d += f" C{x0:.1f},{m:.1f} {x1:.1f},{m:.1f}" if abs(x0 - x1) > 0.5 else " L"
        d += f" {x1:.1f},{y1:.1f}"
    return d


def svg(lay: Layout) -> str:
    """The layout as one standalone SVG element (valid XML), with a legend on top."""
    parts, lx = [], MARGIN
    for kind, (*_, caption) in STYLE.items():  # legend: only the kinds this graph has
        if any(n.kind == kind for n in lay.nodes.values()):
            parts += [_box(kind, lx + 16, MARGIN, 32, 16), _text(lx + 40, MARGIN, caption,
                      font_family="system-ui, sans-serif", fill="#334155")]
            lx += 56 + 7 * len(caption)
    parts.append(f'<g transform="translate(0 {LEGEND_H})">')
    for e in lay.edges:  # edges first, so boxes sit on top of arrow ends
        dash = ' stroke-dasharray="6 4"' if e.back else ""
        parts.append(f'<path d="{_path(e.points)}" fill="none" stroke="#64748b" stroke-width="1.6"'
                     f'{dash} marker-end="url(#arrow)"/>')
        if e.label:  # a white halo keeps the label readable where it crosses a line
            (x0, y0), (x1, y1) = e.points[0], e.points[-1]
            halo = {"stroke": "#fff", "stroke_width": "3", "paint_order": "stroke"}
            parts.append(_text((x0 + x1) / 2 + 5, (y0 + y1) / 2, e.label, font_size="11",
                               fill="#475569", **halo))
    for n in lay.nodes.values():
        label = _text(n.x, n.y, n.label, text_anchor="middle", fill=STYLE[n.kind][2],
                      font_weight="bold" if n.kind == "step" else "normal")
        parts.append(f'<g class="node {n.kind}"><title>{escape(n.tip)}</title>'
                     f'{_box(n.kind, n.x, n.y, n.w, NODE_H)}{label}</g>')
    w, h = max(lay.width, lx + MARGIN), lay.height + LEGEND_H
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w:.0f} {h:.0f}" '
            f'width="{w:.0f}" height="{h:.0f}" font-family="{MONO}" font-size="{FONT}">'
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="9" '
            'markerHeight="9" markerUnits="userSpaceOnUse" orient="auto">'
            '<path d="M0,0 L10,5 L0,10 z" fill="#475569"/></marker></defs>')
    return "\n".join([head, *parts, "</g></svg>"])


def graph_html(workflow: Workflow | type[Workflow], *, title: str = "crag workflow") -> str:
    """A complete offline HTML page drawing every step and event of a workflow class or instance."""
    lay = layout(get_workflow_representation(workflow))  # a class will do: no index or model
    kinds = [n.kind for n in lay.nodes.values()]
    cls = workflow if isinstance(workflow, type) else type(workflow)
    about = escape(cleandoc(cls.__doc__ or "").split("\n\n")[0])  # its own, not Workflow's
    about = f" — {about}" if about else ""
    steps, events = kinds.count("step"), sum(k in PILLS for k in kinds)
    counts = f"{steps} step{'s' * (steps != 1)}, {events} event{'s' * (events != 1)}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>
body {{ margin: 24px; font-family: system-ui, sans-serif; color: #0f172a; background: #fff; }}
h1 {{ font-size: 20px; margin: 0 0 4px; }} p {{ margin: 0 0 8px; color: #475569; }}
svg {{ max-width: 100%; height: auto; }} .node:hover rect {{ filter: brightness(0.92); }}
</style></head>
<body><h1>{escape(title)}</h1><p><code>{escape(lay.name)}</code>{about}</p>
<p><small>{counts}. Hover a step for what it does, an event for its fields.</small></p>
{svg(lay)}
</body></html>
"""


def mermaid(workflow: Workflow | type[Workflow]) -> str:
    """Mermaid `flowchart TD` text of the same graph: one `-->` line per edge, read top down."""
    graph = get_workflow_representation(workflow)
    rank = {v: i for i, v in enumerate(v for row in layout(graph).layers for v in row)}
    # Prefixed ids: a step and an event may share a name, and none is a keyword like `end`.
    prefix = {"step": "step_", "event": "ev_"}
    ids = {n.id: prefix.get(n.node_type, "n_") + re.sub(r"\W", "_", n.id, flags=re.A)
           for n in graph.nodes}
    shape = {"step": '["{}"]', "resource": '[("{}")]', "external": '[/"{}"/]'}
    lines, kinds = ["flowchart TD"], {}
    for n in sorted(graph.nodes, key=lambda n: rank[n.id]):
        kind = _node(n).kind
        kinds[kind] = STYLE[kind]
        box = shape.get(kind, '(["{}"])').format(n.label.replace('"', "#quot;"))  # events: pills
        lines.append(f"    {ids[n.id]}{box}:::{kind}")
    for e in sorted(graph.edges, key=lambda e: (rank.get(e.source, -1), rank.get(e.target, -1))):
        arrow = f'-->|"{e.label.replace(chr(34), "#quot;")}"|' if e.label else "-->"
        lines.append(f"    {ids.get(e.source, e.source)} {arrow} {ids.get(e.target, e.target)}")
    lines += [f"    classDef {k} fill:{f},stroke:{s},color:{c}"
              for k, (f, s, c, _) in kinds.items()]
    return "\n".join(lines) + "\n"
