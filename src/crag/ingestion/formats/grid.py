"""A table's merged cells written out: each cell that spans rows or columns in every place it
covers, so every row holds all its cells ("2025 | Q1 | March"), as a row is read alone.

HTML (`colspan`, `rowspan`), Word (`gridSpan`, `vMerge`) and PowerPoint (`gridSpan`, `rowSpan`)
merge cells; a row that lost the year its merged cell gave it answers "March: $160" of no year.
"""

from __future__ import annotations

Cell = tuple[str, int, int]
"""(text, columns it spans, rows it spans)."""


def spread(rows: list[list[Cell]]) -> list[list[str]]:
    """The rows' cells with each spanning cell copied into every place it covers. The copies
    are bounded by the table's own text (four times over, and 10,000 characters): past that, a
    span is read as one cell, so a file of huge spans cannot grow into gigabytes."""
    budget = 4 * sum(len(text) + 3 for row in rows for text, _, _ in row) + 10_000
    above: dict[int, tuple[str, int]] = {}  # column -> (a cell from a row above, rows it still covers)
    grid = []
    for row in rows:
        out: list[str] = []
        for text, columns, spanned_rows in [*row, ("", 0, 1)]:  # the last: the columns covered after the row's cells
            while len(out) in above:  # the columns that cells from above cover come first
                copied, left = above.pop(len(out))
                if left > 1:
                    above[len(out)] = (copied, left - 1)
                out.append(copied)
            if not columns:
                break
            affordable = max(budget, 0) // (len(text) + 3)  # copies paid for when the cell is placed
            columns = max(1, min(columns, 1 + affordable))
            if columns * spanned_rows - 1 > affordable:
                spanned_rows = 1
            budget -= (columns * max(spanned_rows, 1) - 1) * (len(text) + 3)
            for _ in range(columns):
                if spanned_rows > 1:
                    above[len(out)] = (text, spanned_rows - 1)
                out.append(text)
        grid.append(out)
    return grid
