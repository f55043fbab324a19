"""Picks the node parser that cuts documents into chunks at ingest, by `[index] chunker`."""

from __future__ import annotations

from llama_index.core.node_parser import NodeParser, SentenceSplitter

from crag.config import Settings


def node_parser_for(settings: Settings) -> tuple[NodeParser, str]:
    """The parser `settings.index.chunker` names, and a signature that changes with its settings.

    The index records the signature; ingesting with a different one re-chunks every file.
    """
    index = settings.index
    if index.chunker == "sentence_window":
        from crag.ingestion.chunkers.sentence_window import sentence_window_parser

        return sentence_window_parser(index.window_size), f"sentence_window:{index.window_size}"
    if index.chunker == "agentic":
        from crag.ingestion.chunkers.agentic import agentic_chunker

        return agentic_chunker(settings)
    parser = SentenceSplitter(chunk_size=index.chunk_size, chunk_overlap=index.chunk_overlap)
    return parser, f"sentence:{index.chunk_size}:{index.chunk_overlap}"
