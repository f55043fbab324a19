"""A table's rows as sentences a person can read: each cell named by its column.

Ingest keeps a table as rows, the header first (a CSV's lines; a PDF's, a Word document's or a
Markdown file's rows with cells between bars), so a row alone is "Berries | 150": the value
without what it is. Labelled with its header, "Food: Berries; Calories per portion: 150" is an
answer, and it scores on the question's words for the column as well as for the row.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from crag.text import terms

WIDE = 4
"""Columns past which a row keeps only its first (what the row is about) and those the question
names, when it names some: a row of twelve figures is not an answer to one of them."""


def labelled_rows(units: Sequence[str], *, asked: AbstractSet[str] = frozenset(), comma_separated: bool = False) -> list[str]:
    """`units` (a chunk's sentences) with each table's header taken out and each of its rows
    given as "column: cell; ...". A row is cells between bars, or with `comma_separated` (a CSV
    chunk's lines) a CSV or TSV record; a header is a row followed by a row of as many cells. Other
    units are kept as they are.

    Args:
        asked: the question's terms (`crag.text.terms`): a wide row keeps the columns they name.
    """
    rows = [_cells(unit, comma_separated) for unit in units]
    labelled: list[str] = []
    header: list[str] | None = None
    for n, (unit, row) in enumerate(zip(units, rows)):
        if row is None:
            header = None
            labelled.append(unit)
        elif header is not None and len(row) == len(header):
            labelled.append(_label(header, row, asked))
        elif n + 1 < len(rows) and (after := rows[n + 1]) is not None and len(after) == len(row):
            header = row  # said by every row it labels, so not a sentence of its own
        else:
            header = None
            labelled.append(unit)
    return labelled


def _cells(unit: str, comma_separated: bool) -> list[str] | None:
    """The cells of a row, or None when `unit` is not one."""
    unit = unit.strip()
    if unit.startswith("|") and unit.endswith("|") and len(unit) > 1:  # Markdown's outer bars
        cells = unit[1:-1].split("|")
    elif "|" in unit:
        cells = unit.split("|")
    elif comma_separated:
        delimiter = "\t" if "\t" in unit and "," not in unit else ","
        cells = next(csv.reader([unit], delimiter=delimiter), [])
    else:
        return None
    cells = [" ".join(cell.split()) for cell in cells]
    return cells if len(cells) >= 2 else None


def _label(header: list[str], row: list[str], asked: AbstractSet[str]) -> str:
    columns = list(range(len(row)))
    if len(columns) > WIDE:
        named = [i for i in columns[1:] if asked & set(terms(header[i]))]
        columns = [0, *named] if named else columns
    return "; ".join(f"{header[i]}: {row[i]}" if header[i] else row[i] for i in columns if row[i])
