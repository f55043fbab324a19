"""The index ingest builds and a question loads: chunks, vectors and lexical statistics on disk."""

from crag.index.store import ChunkIndex
from crag.index.vectors import VectorStoreOptions

__all__ = ["ChunkIndex", "VectorStoreOptions"]
