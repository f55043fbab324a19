"""What every document read from a file, or given, goes through before it is cut into chunks:
its text valid Unicode (`valid_unicode`), as people type it (`crag.text.as_typed`), and its labels
(`title`, `section`) made fit to cite: one line, at most `LABEL_CHARS` characters.

A slide whose title box held the whole slide was cited by 600 characters, and a Word heading
typed with a tab kept it ("Wiring\tdiagram"); a citation is where to look, not the text itself.
"""

from __future__ import annotations

import re

from llama_index.core.schema import Document

from crag.text import as_typed

LABEL_CHARS = 80
"""The longest `title` or `section` kept: a heading path three levels deep is ~60 characters."""
LABEL_KEYS = ("title", "section")
_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(text: str) -> str:
    """`text` with a surrogate pair joined into its character and a lone surrogate replaced by
    U+FFFD. pypdf gives a lone one where a font's ToUnicode map names half a pair (docling's
    Korean PDFs do), and no UTF-8 encoder takes it: the index could not be written."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


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
    """`document` with its text valid Unicode and as typed, its metadata's strings valid Unicode,
    and its labels fit to cite (changed in place)."""
    text = as_typed(valid_unicode(document.text))
    if text is not document.text:
        document.set_content(text)
    document.metadata = {valid_unicode(key): valid_unicode(value) if isinstance(value, str) else value
                         for key, value in document.metadata.items()}
    for key in LABEL_KEYS:
        value = document.metadata.get(key)
        if isinstance(value, str):
            document.metadata[key] = label(value)
    return document
