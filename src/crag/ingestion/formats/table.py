"""CSV and TSV: rows in groups, each group a Document that starts with the header line.

A chunk holding rows 30-40 without the header is numbers without names; repeating the header
line in every group lets a question about a column find, and quote, the rows that answer it.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from pathlib import Path

from llama_index.core.schema import Document

from crag.ingestion.formats import doc_id
from crag.ingestion.formats.records_read import Line, RecordsRead, over_limit

GROUP_CHARS = 400
"""Characters of rows per Document: well under the default chunk (256 tokens; a table's digits
and commas run near 2 characters a token), so the splitter never cuts a group and leaves its
second half without the header."""


def table_documents(path: Path, lines: Iterable[Line], left_out: Callable[[tuple[int, str]], None],
                    found: RecordsRead) -> Iterator[Document]:
    """Groups of rows from a table's lines, each group led by the header (the first row), one
    row at a time; `left_out((line, reason))` for a row that cannot be read."""
    lines = iter(lines)
    header: tuple[int, int, str] | None = None
    group: list[tuple[int, int, str]] = []
    size, number = 0, 0
    for row in _rows(path, lines, left_out, found.limit_mb):
        if header is None:
            header = row
            continue
        group.append(row)
        found.records += 1
        size += len(row[2]) + 1
        if size >= GROUP_CHARS:
            yield _document(path, header[2], group, number)
            number, group, size = number + 1, [], 0
    if group:
        yield _document(path, header[2], group, number)  # type: ignore[index]


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


def _rows(path: Path, lines: Iterator[Line], left_out: Callable[[tuple[int, str]], None],
          limit_mb: float) -> Iterator[tuple[int, int, str]]:
    """(first line, last line, the row as written) of each row with text, checked to parse as one;
    a quoted field may run over several lines."""
    blank: list[Line] = []
    for line in lines:  # the header, the first line with text, says how cells are separated
        blank.append(line)
        if line[1] is not None and line[1].strip():
            break
    header = blank[-1][1] if blank and blank[-1][1] is not None else ""
    # Excel's "Unicode text" is tab-separated whatever the file is called.
    tabs = path.suffix.lower() == ".tsv" or ("\t" in header and "," not in header)
    taken: list[tuple[int, str]] = []  # the lines of the row being parsed

    def feed() -> Iterator[str]:
        for number, line in chain(blank, lines):
            if line is None:
                left_out((number, over_limit(limit_mb)))
                continue
            taken.append((number, line))
            yield line

    reader = csv.reader(feed(), delimiter="\t" if tabs else ",", strict=True)
    while True:
        try:
            next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # the reader starts afresh at the next row
            left_out((taken[0][0] if taken else 0, f"not a readable {path.suffix[1:].upper()} row ({exc})"))
        else:
            text = "\n".join(line for _, line in taken)  # as written: what a reader of the file would quote
            if text.strip():
                yield taken[0][0], taken[-1][0], text
        taken.clear()


def _document(path: Path, header: str, group: list[tuple[int, int, str]], number: int) -> Document:
    first, last = group[0][0], group[-1][1]
    metadata = {"title": path.stem, "file_name": path.name, "rows": f"{first}-{last}"}
    # A paragraph break after each row makes each row one sentence: the refiner keeps, and an
    # extractive answer quotes, the row that answers rather than the whole group.
    text = "\n\n".join([header, *(row for _, _, row in group)])
    return Document(text=text, id_=doc_id(path, number), metadata=metadata)
