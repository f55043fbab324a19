"""The sentence-window chunker: one node per sentence, its neighbours kept in metadata.

Retrieval matches single sentences (precise); the `sentence_window` postprocessing stage
then swaps each sentence for its window (`WINDOW_KEY`), so grading and answering see the
context around it. llama-index's `SentenceWindowNodeParser` does the work; crag gives it
its own sentence splitter (the English Punkt tables llama-index-core bundles), since the
parser's default splitter breaks "Dr. Smith" apart.
"""

from __future__ import annotations

from llama_index.core.node_parser import NodeParser, SentenceWindowNodeParser

from crag.errors import ConfigError
from crag.text import sentences

WINDOW_KEY = "window"
ORIGINAL_TEXT_KEY = "original_text"
CHUNKER_PREFIX = "sentence_window"  # how `crag.ingestion.chunkers` signs an index built by this parser


def sentence_window_parser(window_size: int) -> NodeParser:
    """A parser cutting documents into sentences, each with `window_size` neighbours either side.

    The window and the original sentence go into each node's metadata, hidden from the
    embedded and the LLM text, so the index embeds the sentence alone.
    """
    if window_size < 0:
        raise ConfigError(f"index.window_size must be 0 or more, not {window_size}.")
    return SentenceWindowNodeParser.from_defaults(
        sentence_splitter=sentences,
        window_size=window_size,
        window_metadata_key=WINDOW_KEY,
        original_text_metadata_key=ORIGINAL_TEXT_KEY,
    )


def built_with_windows(chunker: str) -> bool:
    """Whether an index whose chunker signature is `chunker` holds sentence windows."""
    return chunker.split(":", 1)[0] == CHUNKER_PREFIX
