"""Rich display in notebooks, reached through a registration from above.

A run's result and a workflow show themselves in Jupyter (`_repr_html_`), but drawing is the
app's job, in a higher layer than either. The package's top (`crag/__init__.py`) registers the
renderers, so a low module asks for one by kind and never imports upward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Renderer = Callable[[Any], "str | None"]

_renderers: dict[str, Renderer] = {}


def register_html(kind: str, renderer: Renderer) -> None:
    """Draw objects of `kind` ("run", "workflow") with `renderer(obj) -> HTML`."""
    _renderers[kind] = renderer


def html(kind: str, obj: Any) -> str | None:
    """`obj` as HTML by the renderer registered for `kind`; None (plain repr) when there is none."""
    renderer = _renderers.get(kind)
    return renderer(obj) if renderer is not None else None
