"""Draw a `Layout` as one inline SVG, and wrap pictures in a self-contained HTML page.

Nothing is fetched: no scripts, stylesheets, fonts or images from anywhere, and the page's
Content-Security-Policy forbids fetching, so a picture that shows here shows offline too.
CSS is scoped to `.crag`, so a page can also be embedded as is (a notebook's HTML output).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from inspect import cleandoc

from workflows import Workflow

from crag.app.render.layout import (
    FONT,
    LEGEND_H,
    MARGIN,
    MONO,
    PILLS,
    STYLE,
    Layout,
    graph_of,
    layout,
)

SANS = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif"
DIM = ("#f8fafc", "#cbd5e1", "#94a3b8")  # fill, stroke, text of what a run did not touch
MARK = {"error": "#dc2626", "degraded": "#d97706"}  # outline of a step that failed or fell back
EDGE = {  # state: (stroke, width, marker id); marker ids are shared by every crag picture
    "plain": ("#64748b", 1.6, "crag-arrow"),
    "lit": ("#1d4ed8", 2.6, "crag-arrow-lit"),
    "dim": ("#cbd5e1", 1.3, "crag-arrow-dim"),
}
ARROWHEAD = {"plain": "#475569"}  # a shade darker than its line; otherwise the line's colour


@dataclass
class Highlight:
    """One run's path over a layout: these nodes and edges are lit, the rest dimmed."""

    nodes: set[str]
    edges: set[tuple[str, str]]  # (source id, target id)
    marks: dict[str, str] = field(default_factory=dict)  # node id -> a key of MARK
    tips: dict[str, str] = field(default_factory=dict)  # node id -> extra tooltip lines


def _box(kind: str, x: float, y: float, w: float, h: float, colours: tuple[str, str] | None = None,
         line: float | None = None, dash: str = "") -> str:
    fill, stroke = colours or STYLE[kind][:2]
    rx = h / 2 if kind in PILLS else 7
    line = line or (2.5 if kind in ("start", "stop") else 1.5)
    dash = dash or ("4 3" if kind == "external" else "")
    dash = f' stroke-dasharray="{dash}"' if dash else ""
    return (f'<rect x="{x - w / 2:.1f}" y="{y - h / 2:.1f}" width="{w:.1f}" height="{h:.1f}" '
            f'rx="{rx:.1f}" fill="{fill}" stroke="{stroke}" stroke-width="{line}"{dash}/>')


def text(x: float, y: float, content: str, **attrs: str) -> str:
    """An SVG <text> centred on y; `font_size=` is written `font-size`, `class_=` `class`."""
    extra = "".join(f' {k.rstrip("_").replace("_", "-")}="{v}"' for k, v in attrs.items())
    return (f'<text x="{x:.1f}" y="{y:.1f}" dominant-baseline="central"{extra}>'
            f'{escape(content)}</text>')


def _path(pts: list[tuple[float, float]]) -> str:
    d = f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        m = (y0 + y1) / 2  # vertical tangents at both ends: S-curves that leave and enter upright
        d += f" C{x0:.1f},{m:.1f} {x1:.1f},{m:.1f}" if abs(x0 - x1) > 0.5 else " L"
        d += f" {x1:.1f},{y1:.1f}"
    return d


def _legend(lay: Layout, hl: Highlight | None) -> tuple[list[str], float, float]:
    """Swatches for the kinds this graph has and, for a run, a second row for path / not taken.

    Returns the SVG parts, the width and the height they take.
    """
    parts, lx, width = [], MARGIN, 0.0
    label = {"font_family": SANS, "fill": "#334155"}
    for kind, (*_, caption) in STYLE.items():
        if any(n.kind == kind for n in lay.nodes.values()):
            parts += [_box(kind, lx + 16, MARGIN, 32, 16), text(lx + 40, MARGIN, caption, **label)]
            lx += 56 + 7 * len(caption)
    if hl is None:
        return parts, lx, LEGEND_H
    width, lx, y = lx, MARGIN, MARGIN + 24
    for state, caption in (("lit", "this run's path"), ("dim", "not taken")):
        stroke, line, marker = EDGE[state]
        parts += [f'<path d="M{lx + 1},{y} h30" stroke="{stroke}" stroke-width="{line}" '
                  f'marker-end="url(#{marker})"/>', text(lx + 40, y, caption, **label)]
        lx += 56 + 7 * len(caption)
    return parts, max(width, lx), LEGEND_H + 24


def svg(lay: Layout, highlight: Highlight | None = None) -> str:
    """The layout as one standalone SVG element (valid XML), with a legend on top.

    With a `highlight`, its nodes and edges are drawn strong and everything else dimmed.
    """
    hl = highlight
    parts, legend_w, legend_h = _legend(lay, hl)
    parts.append(f'<g transform="translate(0 {legend_h})">')
    for e in lay.edges:  # edges first, so boxes sit on top of arrow ends
        state = "plain" if hl is None else "lit" if (e.source, e.target) in hl.edges else "dim"
        stroke, width, marker = EDGE[state]
        dash = ' stroke-dasharray="6 4"' if e.back else ""
        parts.append(f'<path class="edge {state}" data-edge="{escape(e.source)} {escape(e.target)}" '
                     f'd="{_path(e.points)}" fill="none" '
                     f'stroke="{stroke}" stroke-width="{width}"{dash} '
                     f'marker-end="url(#{marker})"/>')
        if e.label:  # beside the arrow's head; a white halo keeps it readable over lines
            x1, y1 = e.points[-1]
            halo = {"stroke": "#fff", "stroke_width": "3", "paint_order": "stroke"}
            parts.append(text(x1 + 6, y1 - 10, e.label, font_size="11",
                              fill="#475569", class_="edge-label", **halo))
    for n in lay.nodes.values():
        fill, stroke, ink = STYLE[n.kind][:3]
        state, line, dash = "", None, ""
        if hl is not None:
            state = "lit" if n.id in hl.nodes else "dim"
            if state == "dim":
                fill, stroke, ink = DIM
            elif n.kind == "step":
                line = 2.5
            if n.id in hl.marks:
                stroke, line = MARK[hl.marks[n.id]], 3.0
                dash = "5 3" if hl.marks[n.id] == "degraded" else ""
        label = text(n.x, n.y - 8 * bool(n.note), n.label, text_anchor="middle", fill=ink,
                     font_weight="bold" if n.kind == "step" else "normal")
        note = text(n.x, n.y + 10, n.note, text_anchor="middle", font_size="11", fill="#1e3a8a",
                    class_="note") if n.note else ""
        tip = n.tip + (f"\n{hl.tips[n.id]}" if hl and n.id in hl.tips else "")
        box = _box(n.kind, n.x, n.y, n.w, n.h, (fill, stroke), line, dash)
        parts.append(f'<g class="{f"node {n.kind} {state}".strip()}" data-id="{escape(n.id)}">'
                     f'<title>{escape(tip)}</title>'
                     f'{box}{label}{note}</g>')
    w, h = max(lay.width, legend_w + MARGIN), lay.height + legend_h
    markers = "".join(
        f'<marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="9" '
        f'markerHeight="9" markerUnits="userSpaceOnUse" orient="auto">'
        f'<path d="M0,0 L10,5 L0,10 z" fill="{ARROWHEAD.get(state, stroke)}"/></marker>'
        for state, (stroke, _, marker) in EDGE.items())
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w:.0f} {h:.0f}" '
            f'width="{w:.0f}" height="{h:.0f}" font-family="{MONO}" font-size="{FONT}">'
            f'<defs>{markers}</defs>')
    return "\n".join([head, *parts, "</g></svg>"])


CSS = """\
.crag { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif;
        color: #0f172a; background: #fff; padding: 16px; }
.crag h1 { font-size: 20px; margin: 0 0 4px; } .crag p { margin: 0 0 8px; color: #475569; }
.crag svg { max-width: 100%; height: auto; } .crag .node:hover rect { filter: brightness(0.92); }
"""


CSP = "default-src 'none'; style-src 'unsafe-inline'"


def page(title: str, body: str, css: str = "", *, csp: str = CSP) -> str:
    """A complete HTML document that fetches nothing (unless `csp` allows it); `body` goes
    inside `<div class="crag">`."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<title>{escape(title)}</title>
<style>
{CSS}{css}</style></head>
<body><div class="crag">
{body}
</div></body></html>
"""


def about(workflow: Workflow | type[Workflow]) -> str:
    """`ClassName — first paragraph of its own docstring`, as HTML."""
    cls = workflow if isinstance(workflow, type) else type(workflow)
    doc = escape(cleandoc(cls.__doc__ or "").split("\n\n")[0])  # its own, not Workflow's
    return f"<code>{escape(cls.__name__)}</code>" + (f" — {doc}" if doc else "")


def graph_html(workflow: Workflow | type[Workflow], *, title: str = "crag workflow") -> str:
    """A complete offline HTML page drawing every step and event of a workflow class or instance."""
    lay = layout(graph_of(workflow))  # a class will do: no index or model
    kinds = [n.kind for n in lay.nodes.values()]
    steps, events = kinds.count("step"), sum(k in PILLS for k in kinds)
    counts = f"{steps} step{'s' * (steps != 1)}, {events} event{'s' * (events != 1)}"
    return page(title, f"""<h1>{escape(title)}</h1><p>{about(workflow)}</p>
<p><small>{counts}. Hover a step for what it does, an event for its fields.</small></p>
{svg(lay)}""")
