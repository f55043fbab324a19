"""The metadata a chunk carries into what is embedded and what a model reads, held to a share
of the chunk.

The splitter subtracts that metadata, in tokens, from every chunk's budget. A 1.5 KB EPUB whose
`dc:creator` is 1,800 characters, or a corpus line with a 3 KB `url`, left no room at all
(`ValueError: Metadata length (616) is longer than chunk size (256)`: the whole ingest failed),
and a 440-character `url` left under 50 tokens a chunk: 391,668 chunks from a 31 MB file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llama_index.core.schema import Document, MetadataMode

from crag.ingestion.formats import LOCATION_KEYS

HIDDEN_KEYS = ("file", "doc_id", "url", *(k for k in LOCATION_KEYS if k != "section"), "cell_type", "ocr")
"""Keys kept out of what is embedded and what a model reads. Where a chunk sits (page, slide,
cell...) and where it came from (a `url`) are carried to its citation: "page: 12" and an
address are not knowledge. A section heading stays."""
METADATA_SHARE = 0.25
"""The most of a chunk's tokens its metadata may take: a quarter, 64 of the default 256, room for
a title and a section heading at their longest (80 characters each, `crag.ingestion.cleaning`).
A chunk keeps at least three quarters for its text."""
CUT = "…"

Tokens = Callable[[str], Sequence[int]]


def hide(document: Document, keys: Sequence[str]) -> None:
    """Keep `keys` out of the document's embedded and model-read metadata (a parser's own stay)."""
    document.excluded_embed_metadata_keys = sorted({*document.excluded_embed_metadata_keys, *keys})
    document.excluded_llm_metadata_keys = sorted({*document.excluded_llm_metadata_keys, *keys})


def fit_metadata(document: Document, room: int, tokens: Tokens) -> None:
    """Cut the document's shown metadata values (those a mode embeds or shows) so that, as the
    splitter counts it, the metadata takes at most `room` tokens: a short value whole, the longer
    ones sharing what is left, each cut at a word with "…"; a value that is not a string, or a
    key with no room left, is hidden instead. Changed in place; nothing is done when it fits."""
    if _length(document, tokens) <= room:
        return
    hide(document, [k for k in _shown(document) if not isinstance(document.metadata[k], str)])
    shown = _shown(document)
    line = {k: len(tokens(document.metadata_template.format(key=k, value=document.metadata[k]))) + 1 for k in shown}
    left = room
    for number, key in enumerate(sorted(shown, key=line.__getitem__)):  # the shortest first, whole
        share = left // (len(shown) - number)
        if line[key] > share:
            name = len(tokens(document.metadata_template.format(key=key, value=""))) + 1
            if share - name < 4:  # no room for a value worth reading
                hide(document, [key])
                continue
            document.metadata[key] = _cut(document.metadata[key], share - name - 1, tokens)
        left -= min(line[key], share)
    while _length(document, tokens) > room and (left_shown := _shown(document)):  # joins tokenize apart
        hide(document, [max(left_shown, key=lambda k: len(str(document.metadata[k])))])


def _shown(document: Document) -> list[str]:
    """The metadata keys embedded or shown to a model."""
    return [k for k in document.metadata
            if k not in document.excluded_embed_metadata_keys or k not in document.excluded_llm_metadata_keys]


def _length(document: Document, tokens: Tokens) -> int:
    """The metadata's length in tokens as the splitter counts it: the longer of its two modes'."""
    return max(len(tokens(document.get_metadata_str(mode))) for mode in (MetadataMode.EMBED, MetadataMode.LLM))


def _cut(value: str, limit: int, tokens: Tokens) -> str:
    """The longest start of `value` within `limit` tokens, "…" included, ended at a word if one
    ends in its second half."""
    low, high = 0, len(value)
    while low < high:  # the most characters within the limit
        middle = (low + high + 1) // 2
        if len(tokens(value[:middle] + CUT)) <= limit:
            low = middle
        else:
            high = middle - 1
    head = value[:low]
    space = head.rfind(" ")
    return (head[:space] if space > low // 2 else head).rstrip(" ,;:/") + CUT
