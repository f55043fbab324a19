"""The index ingest builds and a question loads: chunks, vectors and lexical statistics on disk."""

from crag.index.store import ChunkIndex

__all__ = ["ChunkIndex"]
