"""CSV and TSV: rows in groups, each group a Document that starts with the header line.

A chunk holding rows 30-40 without the header is numbers without names; repeating the header
line in every group lets a question about a column find, and quote, the rows that answer it.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.formats import decode_text, doc_id, require_bytes

GROUP_CHARS = 400
"""Characters of rows per Document: well under the default chunk (256 tokens; a table's digits
and commas run near 2 characters a token), so the splitter never cuts a group and leaves its
second half without the header."""


def read_table(path: Path, data: bytes) -> Iterator[Document]:
    """Groups of rows; `rows` gives their line numbers in the file ("2-14"), the header line 1."""
    require_bytes(path, data, "table")
    rows = _rows(path, decode_text(path, data).splitlines())
    if not rows:
        return
    header_line, records = rows[0], rows[1:]
    group: list[tuple[int, str]] = []
    number = 0
    for record in records:
        group.append(record)
        if sum(len(text) + 1 for _, text in group) >= GROUP_CHARS:
            yield _document(path, header_line[1], group, number)
            number, group = number + 1, []
    if group:
        yield _document(path, header_line[1], group, number)


def row_groups(rows: list[str], limit: int = GROUP_CHARS) -> Iterator[str]:
    """A table given as lines, its first the header, in groups of rows under `limit` characters,
    each group led by the header and each row a paragraph (a sentence of its own): how a
    Word table is kept, as a CSV's rows are."""
    header, group = rows[0], []
    for row in rows[1:]:
        group.append(row)
        if sum(len(text) + 1 for text in group) >= limit:
            yield "\n\n".join([header, *group])
            group = []
    if group or len(rows) == 1:
        yield "\n\n".join([header, *group])


def _rows(path: Path, lines: list[str]) -> list[tuple[int, str]]:
    """(line number, line) of each non-empty record, checked to parse as one."""
    header = next((line for line in lines if line.strip()), "")
    # Excel's "Unicode text" is tab-separated whatever the file is called.
    tabs = path.suffix.lower() == ".tsv" or ("\t" in header and "," not in header)
    delimiter = "\t" if tabs else ","
    try:
        # Only checked: a quoted field holding a newline is rare in the tables people keep,
        # and the line as written is what a reader of the file would quote.
        list(csv.reader(lines, delimiter=delimiter, strict=True))
    except csv.Error as exc:
        raise IngestError(f"{path} is not a readable {path.suffix[1:].upper()} table ({exc}).") from None
    return [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]


def _document(path: Path, header: str, group: list[tuple[int, str]], number: int) -> Document:
    first, last = group[0][0], group[-1][0]
    metadata = {"title": path.stem, "file_name": path.name, "rows": f"{first}-{last}"}
    # A paragraph break after each row makes each row one sentence: the refiner keeps, and an
    # extractive answer quotes, the row that answers rather than the whole group.
    text = "\n\n".join([header, *(line for _, line in group)])
    return Document(text=text, id_=doc_id(path, number), metadata=metadata)
