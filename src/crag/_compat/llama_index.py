"""The private part of llama-index-core (written against 0.14.25) that crag's postprocessing uses.

A `BaseNodePostprocessor` with an async path of its own (an LLM reranker) overrides the
private `_apostprocess_nodes`; one without inherits the base's, which runs the sync path
in asyncio's default executor, a second pool of threads beside crag's (`crag._offload`
says why crag keeps one). llama-index says publicly neither which kind a postprocessor is
nor in which pool its sync path runs, so `has_own_async_path` compares the method with the
base's, and crag runs a sync-only one in its own pool. Running every postprocessor's sync
path there instead would hold one of crag's few threads for each LLM reranker's call.
"""

from __future__ import annotations

from llama_index.core.postprocessor.types import BaseNodePostprocessor

__all__ = ["has_own_async_path"]


def has_own_async_path(postprocessor: BaseNodePostprocessor) -> bool:
    """Whether `postprocessor` overrides the base's async path (else it only computes)."""
    return type(postprocessor)._apostprocess_nodes is not BaseNodePostprocessor._apostprocess_nodes
