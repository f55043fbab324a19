"""What runs at ingest: readers, chunkers, summaries and the incremental pipeline."""

from crag.ingestion.pipeline import IngestReport, ProgressCallback, Summarizer, ingest

__all__ = ["IngestReport", "ProgressCallback", "Summarizer", "ingest"]
