"""Readers for documents as people keep them: PDF, Word, PowerPoint, notebooks, CSV/TSV.

Each module turns one file's bytes into Documents whose metadata says where each piece came
from (`page`, `section`, `slide`, `cell`, `rows`), so a chunk can be cited by place. A file
that cannot be read raises `IngestError` with one line naming the file and the reason;
`crag.ingestion.readers` keeps the registry of suffixes.
"""

from __future__ import annotations

from pathlib import Path

from crag.errors import IngestError

LOCATION_KEYS = ("file_name", "page", "slide", "cell", "rows", "section")
"""Metadata keys that say where a chunk sits in its file; citations read them."""


def doc_id(path: Path, number: int) -> str:
    """The id of a file's `number`th document (from 0): the path, then `path#number`, as
    Markdown sections are numbered."""
    return str(path) if number == 0 else f"{path}#{number}"


def short_reason(exc: BaseException) -> str:
    """A parser's error in a few words, for a one-line message: its first line, else its type."""
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


def require_bytes(path: Path, data: bytes, kind: str) -> None:
    """Refuse an empty file with a reason, before a parser says something obscure about it."""
    if not data:
        raise IngestError(f"{path} is empty (0 bytes); it is not a {kind}. Leave it out.")


def decode_text(path: Path, data: bytes) -> str:
    """`data` as UTF-8 (a byte-order mark dropped), or an error naming the first bad line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise IngestError(
            f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}; mixed or "
            "legacy encoding); save it as UTF-8 and ingest it again."
        ) from None
