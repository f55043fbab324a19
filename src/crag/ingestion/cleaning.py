"""What every document read from a file, or given, goes through before it is cut into chunks:
its text as people type it (`crag.text.as_typed`) and its labels (`title`, `section`) made fit
to cite: one line, at most `LABEL_CHARS` characters.

A slide whose title box held the whole slide was cited by 600 characters, and a Word heading
typed with a tab kept it ("Wiring\tdiagram"); a citation is where to look, not the text itself.
"""

from __future__ import annotations

from llama_index.core.schema import Document

from crag.text import as_typed

LABEL_CHARS = 80
"""The longest `title` or `section` kept: a heading path three levels deep is ~60 characters."""
LABEL_KEYS = ("title", "section")


def label(value: str, limit: int = LABEL_CHARS) -> str:
    """`value` as a citation shows it: as typed, on one line, cut at the last word that fits
    (with "…") when longer than `limit`."""
    flat = " ".join(as_typed(value).split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:/") + "…"


def clean(document: Document) -> Document:
    """`document` with its text as typed and its labels fit to cite (changed in place)."""
    text = as_typed(document.text)
    if text is not document.text:
        document.set_content(text)
    for key in LABEL_KEYS:
        value = document.metadata.get(key)
        if isinstance(value, str):
            document.metadata[key] = label(value)
    return document
