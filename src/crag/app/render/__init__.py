"""Pictures of a workflow: every possible flow, or one run's path, as offline HTML or Mermaid.

Built on the engine's own graph data (`workflows.representation.get_workflow_representation`)
rather than llama-index-utils-workflow, whose pyvis page loads vis-network from a CDN and is
blank offline. crag lays the graph out in Python and writes inline SVG: no scripts, and
nothing fetched from anywhere.

    layout.py   the graph placed top to bottom (Layout, layout)
    svg.py      a Layout as SVG, the HTML page around it (svg, graph_html)
    overlay.py  one run's path, notes and timeline on top (run_path, trace_html)
    mermaid.py  the same, as Mermaid text (mermaid)
"""

from crag.app.render.layout import Edge, Layout, Node, layout
from crag.app.render.mermaid import mermaid
from crag.app.render.overlay import run_path, timeline_svg, trace_html
from crag.app.render.svg import Highlight, graph_html, svg

__all__ = [
    "Edge",
    "Highlight",
    "Layout",
    "Node",
    "graph_html",
    "layout",
    "mermaid",
    "run_path",
    "svg",
    "timeline_svg",
    "trace_html",
]
