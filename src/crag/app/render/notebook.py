"""What Jupyter shows for a run's result and for a workflow (registered in `crag/__init__.py`)."""

from __future__ import annotations

from typing import Any

from crag.app.render.overlay import trace_html
from crag.app.render.svg import graph_html
from crag.errors import TraceError
from crag.events import CragResult


def run_html(result: CragResult) -> str | None:
    """The run explained: why its verdict, its answer and sources, its path on the corrective
    workflow's graph (inline HTML and SVG, nothing fetched)."""
    from crag.workflows.corrective import CorrectiveRAGWorkflow

    try:
        return trace_html(CorrectiveRAGWorkflow, result.trace, title=f"crag run: {result.verdict}")
    except TraceError:  # another workflow's steps: the text repr will do
        return None


def workflow_html(workflow: Any) -> str:
    """The workflow's graph: every possible flow, inline SVG, nothing fetched."""
    return graph_html(workflow, title=type(workflow).__name__)
