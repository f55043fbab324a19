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


CHUNKING_SETTINGS = frozenset(
    {"chunker", "chunk_size", "chunk_overlap", "window_size", "agentic_threshold", "agentic_pronouns"}
)


def keep_recorded_chunker(settings: Settings, recorded: str) -> Settings:
    """`settings` with the chunking an index `recorded`, unless the chunking was set explicitly
    (flag, file or environment): adding a file must not re-chunk the whole index."""
    if not recorded or settings.index.model_fields_set & CHUNKING_SETTINGS:
        return settings
    kind, _, rest = recorded.partition(":")
    values = rest.split(":")
    try:
        if kind == "sentence":
            update = {"chunker": "sentence", "chunk_size": int(values[0]), "chunk_overlap": int(values[1])}
        elif kind == "sentence_window":
            update = {"chunker": "sentence_window", "window_size": int(values[0])}
        elif kind == "agentic" and values[0] == "offline":
            update = {"chunker": "agentic", "agentic_threshold": float(values[1]), "chunk_size": int(values[2]),
                      "agentic_pronouns": values[3] == "pronouns"}
        elif kind == "agentic":  # agentic:llm:MODEL:THRESHOLD:SIZE
            update = {"chunker": "agentic", "agentic_threshold": float(values[-2]), "chunk_size": int(values[-1])}
        else:
            return settings
    except (IndexError, ValueError):  # a signature this crag does not know: chunk as configured
        return settings
    return settings.model_copy(update={"index": settings.index.model_copy(update=update)})
