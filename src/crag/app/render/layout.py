"""Place a workflow's graph (the engine's own `WorkflowGraph`) top to bottom, in Python.

A layered layout in the Sugiyama style: cycles broken by a DFS from the start event,
longest-path layers, barycenter ordering and x placement. Drawing is `crag.app.render.svg`'s job.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from workflows import Workflow
from workflows.representation import WorkflowGraph, WorkflowGraphNode, get_workflow_representation

# Labels are code names in a monospace font, so a box sized by character count always fits them.
FONT, CHAR_W, NODE_H, PAD_X = 13, 7.9, 34, 16
NOTE_CHAR_W, NOTE_H = 6.7, 50  # a node with a note (a second, smaller line) is taller
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
    h: float = NODE_H
    note: str | None = None  # a second line under the label, e.g. a step's time in one run
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


def graph_of(workflow: Workflow | type[Workflow]) -> WorkflowGraph:
    """The engine's graph of a workflow class or instance, with the edge labels the class
    declares in `edge_labels` (`{(source id, target id): label}`), e.g. which verdicts take
    each of the corrective workflow's grade out-edges."""
    graph = get_workflow_representation(workflow)
    labels = getattr(workflow, "edge_labels", None) or {}
    for e in graph.edges:
        e.label = labels.get((e.source, e.target), e.label)
    return graph


def to_node(n: WorkflowGraphNode, note: str | None = None) -> Node:
    """The box for a graph node: its kind (a key of STYLE), tooltip and size."""
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
    w = max(len(n.label) * CHAR_W, len(note or "") * NOTE_CHAR_W) + 2 * PAD_X + pad
    return Node(n.id, n.label, kind, tip, w, NOTE_H if note else NODE_H, note)


def layout(graph: WorkflowGraph, notes: Mapping[str, str] | None = None) -> Layout:
    """Layered layout: break cycles, longest-path layers, barycenter order, then x placement.

    `notes` maps node ids to a second line drawn under their label (boxes grow to fit).
    """
    notes = notes or {}
    nodes = {n.id: to_node(n, notes.get(n.id)) for n in graph.nodes}
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
    row_h = max((n.h for n in nodes.values()), default=NODE_H)
    y = {v: MARGIN + row_h / 2 + i * (row_h + LAYER_GAP) for i, r in enumerate(rows) for v in r}
    x = {v: x[v] + MARGIN - left for v in x}
    for v, n in nodes.items():
        n.x, n.y = x[v], y[v]
    ports = _ports(nodes, up, down, x)
    edges = []
    for e, (s, t), chain in zip(kept, dag, chains):  # straight through dummy rows, curved between
        pts = [(x[s] + ports[s, chain[1]].pop(), y[s] + nodes[s].h / 2)]
        pts += [(x[d], y[d] + dy) for d in chain[1:-1] for dy in (-row_h / 2, row_h / 2)]
        pts.append((x[t] + ports[t, chain[-2]].pop(), y[t] - nodes[t].h / 2))
        rev = (s, t) != (e.source, e.target)
        edges.append(Edge(e.source, e.target, e.label, pts[::-1] if rev else pts, rev))
    layers = [[v for v in row if v in nodes] for row in rows]
    right = max((x[v] + width[v] / 2 for v in x), default=0.0) + MARGIN
    bottom = max(y.values(), default=0.0) + row_h / 2 + MARGIN
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
