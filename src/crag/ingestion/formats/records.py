"""Containers of records: a JSON Lines corpus (one passage a line) and CSV/TSV tables, read one
record at a time.

A container holds many documents, so the bounds on one document hold for each record: a line
longer than `ingest.max_text_mb` million characters is left out unread, and the file as a whole
is bounded by `ingest.max_file_mb` alone. A 100,000-passage corpus (88 million characters, the
shape of every QA data set) was refused whole by `max_text_mb`, a bound meant for one document.

`stream_records` reads a file in the ingest's own process, a piece at a time from a checked
open: the parsers (`json`, `csv`) are the standard library's, linear in what they read and with
nothing to unpack, so the reader's child (`crag.ingestion.worker`, there for PDF and Office
parsers) would add only the cost of sending every record across a pipe, and would have to hold
the whole file's documents to send them. A record that cannot be read (a broken line) is left
out and named; the file's other records are read.
"""

from __future__ import annotations

import codecs
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.files import MB, PIECE, ReadLimits, open_checked
from crag.ingestion.formats import decode_text
from crag.ingestion.formats.records_read import Line, RecordsRead, over_limit
from crag.ingestion.formats.table import table_documents

RECORD_SUFFIXES = (".jsonl", ".csv", ".tsv")
"""The containers `stream_records` reads."""
_MARKS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
          (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


class RecordError(IngestError):
    """One record cannot be read; the message says why, without the file's name."""


def stream_records(path: Path, limits: ReadLimits, found: RecordsRead) -> Iterator[Document]:
    """The Documents of a .jsonl, .csv or .tsv file, read a piece at a time; a record that cannot
    be read goes to `found.left_out`, and `found.sha256` is the hash of the bytes read. An
    `IngestError` when the file itself cannot be read (refused by `open_checked`, not text)."""
    digest = hashlib.sha256()
    found.limit_mb = limits.max_text_mb
    yield from records_of(path, file_lines(path, limits, digest.update), found.left_out.append, found)
    found.sha256 = digest.hexdigest()


def read_records(path: Path, data: bytes) -> Iterator[Document]:
    """The Documents of a .jsonl, .csv or .tsv file's bytes (the reader `read_documents` uses);
    `IngestError` at the first record that cannot be read, naming its line. An empty file
    gives none: it has no text, as an empty .txt file has none."""

    def refuse(problem: tuple[int, str]) -> None:
        raise IngestError(f"{path}:{problem[0]}: {problem[1]}.")

    lines = ((n, line.removesuffix("\r")) for n, line in enumerate(decode_text(path, data).split("\n"), start=1))
    return records_of(path, lines, refuse, RecordsRead())


def records_of(path: Path, lines: Iterable[Line], left_out: Callable[[tuple[int, str]], None],
               found: RecordsRead) -> Iterator[Document]:
    """The Documents of a container's lines, by its suffix; `left_out((line, reason))` for each
    record that cannot be read."""
    if path.suffix.lower() == ".jsonl":
        return _corpus_documents(path, lines, left_out, found)
    return table_documents(path, lines, left_out, found)


def file_lines(path: Path, limits: ReadLimits, seen: Callable[[bytes], object] = len) -> Iterator[Line]:
    """The lines of a text file (UTF-8, or UTF-16/32 with a byte-order mark), split at "\\n"
    only, read a piece at a time from a checked open, each piece given to `seen` (a digest's
    `update`); a line longer than `limits.max_text_mb` million characters comes as None, its
    text dropped as it is read, so no line held is longer."""
    limit = int(limits.max_text_mb * 1_000_000)
    read, number = 0, 1
    pending: list[str] = []
    size = 0  # characters pending; -1 once past the limit
    with open_checked(path, limits) as file:
        piece = _piece(path, file)
        encoding = next((name for mark, name in _MARKS if piece.startswith(mark)), "utf-8-sig")
        decoder = codecs.getincrementaldecoder(encoding)()
        while True:
            read += len(piece)
            if read > limits.max_file_mb * MB:
                raise IngestError(f"{path} grew past ingest.max_file_mb ({limits.max_file_mb:g} MB) "
                                  "as it was read; leave it out, or raise the limit.")
            seen(piece)
            try:
                *ends, rest = decoder.decode(piece, final=not piece).split("\n")
            except UnicodeDecodeError as exc:
                raise IngestError(_not_text(path, encoding, piece, exc, number)) from None
            for part in ends:
                fits = 0 <= size and size + len(part) <= limit
                yield number, "".join([*pending, part]).removesuffix("\r") if fits else None
                number, pending, size = number + 1, [], 0
            if size >= 0:
                pending.append(rest)
                size += len(rest)
                if size > limit:  # drop what is held; the rest of the line is skipped as it comes
                    pending, size = [], -1
            if not piece:
                break
            piece = _piece(path, file)
    if size < 0:
        yield number, None
    elif pending and (line := "".join(pending)).strip():
        yield number, line.removesuffix("\r")


def _piece(path: Path, file: BinaryIO) -> bytes:
    try:
        return file.read(PIECE)
    except OSError as exc:
        raise IngestError(f"Cannot read {path}: {exc.strerror or exc}.") from None


def _not_text(path: Path, encoding: str, piece: bytes, exc: UnicodeDecodeError, number: int) -> str:
    """decode_text's reasons, for a file read a piece at a time."""
    if encoding != "utf-8-sig":
        return (f"{path} begins with a {encoding.upper()} byte-order mark but is not {encoding.upper()} "
                "text; save it again.")
    seen = bytes(exc.object)  # the decoder's input: the piece, or at the end what it held back
    line = number + piece[: exc.start].count(b"\n")
    return (f"{path} is not UTF-8 text (byte 0x{seen[min(exc.start, len(seen) - 1)]:02x} on line {line}; mixed "
            "or legacy encoding); save it as UTF-8 and ingest it again.")


def _corpus_documents(path: Path, lines: Iterable[Line], left_out: Callable[[tuple[int, str]], None],
                      found: RecordsRead) -> Iterator[Document]:
    for number, line in lines:
        if line is None:
            left_out((number, over_limit(found.limit_mb)))
            continue
        if not line.strip():
            continue
        try:
            document = corpus_document(path, line)
        except RecordError as exc:
            left_out((number, str(exc)))
            continue
        if document is not None:
            found.records += 1
            yield document


def corpus_document(path: Path, line: str) -> Document | None:
    """The Document of one corpus line, `{"doc_id", "text"}` with an optional `title` and `url`;
    None when its text is empty. `RecordError` when it is not such a record."""
    try:
        record = json.loads(line)
        doc_id, body = record["doc_id"], record["text"]
        json.dumps(record, ensure_ascii=False).encode("utf-8")  # the index must write it back
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise RecordError(f"expected a JSON object with 'doc_id' and 'text' ({exc})") from None
    except RecursionError:
        raise RecordError("JSON nested too deeply to read; expected a flat object") from None
    except UnicodeEncodeError:  # a "\ud800" escape decodes to a lone surrogate
        raise RecordError("holds a lone surrogate (a \\ud800-\\udfff escape with no pair), "
                          "which is not text; fix or remove that escape") from None
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or not str(doc_id).strip():
        raise RecordError(f"'doc_id' must be a non-empty string (got {json.dumps(doc_id)[:40]})")
    if not isinstance(body, str):
        raise RecordError(f"'text' must be a string (got {json.dumps(body)[:40]})")
    if not body.strip():
        return None  # nothing to index, as for an empty .txt file
    doc_id = str(doc_id)
    metadata = {"title": str(record.get("title") or doc_id), "file": str(path)}
    if record.get("url"):
        metadata["url"] = str(record["url"])
    return Document(text=body, id_=doc_id, metadata=metadata)
