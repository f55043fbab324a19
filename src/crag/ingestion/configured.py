"""Ingest as the settings say: the one place `crag ingest` and `crag mcp`'s ingest tool turn
settings into an ingest (the index's own chunker kept, summaries when asked for, the vector store
and the readers named in crag.toml)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from crag.config import Settings
from crag.index.store import recorded_chunker
from crag.ingestion.chunkers import keep_recorded_chunker, node_parser_for
from crag.ingestion.chunkers.agentic import AgenticChunker
from crag.ingestion.pipeline import IngestReport, ProgressCallback, ingest


def ingest_with_settings(
    paths: Sequence[str | Path], settings: Settings, progress: ProgressCallback | None = None
) -> IngestReport:
    """Add `paths` to the index `settings.index.path` names, as `settings` say."""
    settings = keep_recorded_chunker(settings, recorded_chunker(settings.index.path))
    node_parser, chunker = node_parser_for(settings)
    if isinstance(node_parser, AgenticChunker):  # it counts documents as it goes
        node_parser.progress = progress
    summarize = None
    if settings.index.summaries:
        from crag.ingestion.summaries import (
            summarizer_for,  # a model's summaries: loaded when asked
        )

        summarize = summarizer_for(settings, progress)
    return ingest(
        list(paths),
        settings.index.path,
        chunk_size=settings.index.chunk_size,
        chunk_overlap=settings.index.chunk_overlap,
        progress=progress,
        node_parser=node_parser,
        chunker=chunker,
        summarize=summarize,
        vector_store=settings.vector_store,
        readers=settings.ingest.readers,
        limits=settings.ingest,
    )
