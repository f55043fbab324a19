"""The index ingest builds and a question loads: chunks, vectors and lexical statistics on disk.

Its two names load on first use (PEP 562), so that a module of the package that needs neither
(`crag.index.collections`, for `crag keys`) does not load llama-index and NumPy with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crag.index.store import ChunkIndex
    from crag.index.vectors import VectorStoreOptions

__all__ = ["ChunkIndex", "VectorStoreOptions"]


def __getattr__(name: str) -> Any:
    if name == "ChunkIndex":
        from crag.index.store import ChunkIndex

        return ChunkIndex
    if name == "VectorStoreOptions":
        from crag.index.vectors import VectorStoreOptions

        return VectorStoreOptions
    raise AttributeError(f"module 'crag.index' has no attribute {name!r}")
