"""The private part of llama-index-workflows (written against 2.26.1) that crag's workflows use.

The engine looks a workflow's steps up with `Workflow._get_steps()` (`inspect.getmembers`
over the whole instance, about 0.2 ms) each time a step runs, eight times a run
(docs/measured.md). It has no public hook for that lookup, so `CachedStepLookup` overrides
the private method, and reads the class's private `_step_functions_version`, which the
engine bumps when a step is added, to know when the cache is stale. Without it a run
costs the same, less fast.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CachedStepLookup"]


class CachedStepLookup:
    """Mixed in ahead of `workflows.Workflow`: its step lookup, made once per step version."""

    def _get_steps(self) -> dict[str, Any]:
        version = type(self)._step_functions_version  # type: ignore[attr-defined]
        cached = self.__dict__.get("_crag_steps")
        if cached is None or cached[0] != version:
            cached = (version, super()._get_steps())  # type: ignore[misc]
            self.__dict__["_crag_steps"] = cached
        return dict(cached[1])
