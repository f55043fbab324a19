"""Readers for documents as people keep them: PDF, Word, PowerPoint, notebooks, CSV/TSV.

Each module turns one file's bytes into Documents whose metadata says where each piece came
from (`page`, `section`, `slide`, `cell`, `rows`), so a chunk can be cited by place. A file
that cannot be read raises `IngestError` with one line naming the file and the reason;
`crag.ingestion.readers` keeps the registry of suffixes.
"""

from __future__ import annotations

import codecs
import struct
import zlib
from pathlib import Path

from crag.errors import IngestError
from crag.trace import file_id

LOCATION_KEYS = ("file_name", "page", "slide", "cell", "rows", "section")
"""Metadata keys that say where a chunk sits in its file; citations read them."""


def doc_id(path: Path, number: int) -> str:
    """The id of a file's `number`th document (from 0): the file's id (`crag.trace.file_id`, a
    hash of its absolute path), then `id#number`. Answers show it, and must not show where the
    file lives; it stays the same when the index folder moves (the documents' place makes it)."""
    key = file_id(str(path.resolve()))
    return key if number == 0 else f"{key}#{number}"


def short_reason(exc: BaseException) -> str:
    """A parser's error in a few words, for a one-line message: its first line, else its type."""
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


def pdf_damage() -> tuple[type[Exception], ...]:
    """What pypdf raises on a damaged file: its own errors, and the built-in ones its parser
    lets through on bad input (a missing key, an object of the wrong type, a short, cyclic or
    endless structure, a stream that does not inflate). Anything else is a bug of crag's, not
    damage, and is not reported as damage. pypdf is imported on the first call, as it is read."""
    from pypdf.errors import DependencyError, PyPdfError

    return (PyPdfError, DependencyError, LookupError, TypeError, ValueError, AttributeError,
            AssertionError, RecursionError, ArithmeticError, EOFError, OSError, NotImplementedError,
            struct.error, zlib.error)


def require_bytes(path: Path, data: bytes, kind: str) -> None:
    """Refuse an empty file with a reason, before a parser says something obscure about it."""
    if not data:
        raise IngestError(f"{path} is empty (0 bytes); it is not a {kind}. Leave it out.")


# UTF-32's marks first: UTF-32-LE's begins with UTF-16-LE's. Excel's "Unicode text" and
# PowerShell's files are UTF-16 with a mark; without one, UTF-16 cannot be told from bytes.
_MARKS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
          (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def decode_text(path: Path, data: bytes) -> str:
    """`data` as the Unicode its byte-order mark names (UTF-16 or UTF-32), else as UTF-8 (a mark
    dropped); an error naming the first bad line when it is neither."""
    encoding = next((name for mark, name in _MARKS if data.startswith(mark)), "utf-8-sig")
    try:
        return data.decode(encoding)  # "utf-16" and "utf-32" read the mark, and drop it
    except UnicodeDecodeError as exc:
        if encoding != "utf-8-sig":
            raise IngestError(f"{path} begins with a {encoding.upper()} byte-order mark but is not "
                              f"{encoding.upper()} text (at byte {exc.start}); save it again.") from None
        line = data[: exc.start].count(b"\n") + 1
        raise IngestError(
            f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}; mixed or "
            "legacy encoding); save it as UTF-8 and ingest it again."
        ) from None
