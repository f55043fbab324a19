"""Picks the node parser that cuts documents into chunks at ingest, by name (`crag ingest`
passes `[index]`'s values: `crag.ingestion.configured.node_parser_for`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llama_index.core.node_parser import NodeParser, SentenceSplitter

if TYPE_CHECKING:
    from crag.models import LLMFactory


def node_parser(
    chunker: str = "sentence",
    *,
    chunk_size: int = 256,
    chunk_overlap: int = 32,
    window_size: int = 3,
    agentic_threshold: float = 0.2,
    agentic_pronouns: bool = True,
    llms: LLMFactory | None = None,
) -> tuple[NodeParser, str]:
    """The parser `chunker` names, and a signature that changes with its arguments.

    The index records the signature; ingesting with a different one re-chunks every file.

    Args:
        chunker: "sentence" (token-budget chunks of `chunk_size`, `chunk_overlap` shared),
            "sentence_window" (one node per sentence, `window_size` sentences either side in
            its metadata) or "agentic" (propositions grouped into chunks of at most
            `chunk_size` tokens: `crag.ingestion.chunkers.agentic`).
        agentic_threshold, agentic_pronouns: the agentic chunker's offline method.
        llms: the agentic chunker asks this model when one is configured.
    """
    if chunker == "sentence_window":
        from crag.ingestion.chunkers.sentence_window import sentence_window_parser

        return sentence_window_parser(window_size), f"sentence_window:{window_size}"
    if chunker == "agentic":
        from crag.ingestion.chunkers.agentic import agentic_chunker

        return agentic_chunker(
            threshold=agentic_threshold, max_tokens=chunk_size, resolve_pronouns=agentic_pronouns, llms=llms
        )
    parser = SentenceSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    return parser, f"sentence:{chunk_size}:{chunk_overlap}"
