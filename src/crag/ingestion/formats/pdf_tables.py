"""PDF tables: rows kept as rows, found from where pypdf places each run of text on a page.

pypdf's plain extraction hands its visitor one run of text per stretch it reads without a
gap, with the run's position: a line of prose is one run, a table's cell is one run (a cell
that wraps, one run a line). A table is then a block of lines whose runs start in the same
columns: at least three lines holding two or more runs, the runs of each column starting to
the right of every run of the column before. This costs no second pass over the page (pypdf's
layout mode, the other way to see columns, reads the page again). Lines are rows; a line
with nothing in the first column (a wrapped cell's other lines) joins the nearest line that
has, as a browser centres a short cell beside a tall one. The first row is the header.

Prose is not a table: a line of one column runs across the next column's start, and the
lines of a page set in two or three columns are long (their first "cells" have more than
`KEY_WORDS` words), where a table's first column holds keys: names, dates, numbers.

Finding them costs time in proportion to the page's runs: a block of lines is grown one line
at a time, each line counted into the columns once and checked against them again only when
they move, and a page whose columns keep moving (more checks than `RECHECKS` a line) keeps its
text as it is. Checking every block again from its top at each line took 14.6 s for one page
of 4,000 rows, and over two minutes for 32,000.

A table whose columns were not found cleanly stays in the page's text, as pages were read
before tables were found: one whose header (its first row) has an empty cell or a cell of
figures, whose rows leave a cell empty more than a quarter of the time, that has fewer than
two rows under its header, or whose rows all start with the same text (a title wrapped
beside its label, "Table 4. —"). On the real-world set's government PDFs,
such a table came out with its title line for header and several numbers to a cell, and its
rows, cut from the column heads the page's text kept, were found less often than the page.
"""

from __future__ import annotations

import bisect
import re
import statistics
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise

from crag.errors import IngestError

KEY_WORDS = 4
"""Most words the median cell of a table's first column may have; prose columns have 6 to 12."""
RUN_WORDS = 4
"""Most words the median run of a table's lines may have (`_terse`)."""
CHAR_WIDTH = 0.4
"""A run's least width a character, in ems: short of any text font's mean (0.45 to 0.55), so a
cell is never thought wider than it is; a line of prose is wider by far."""
RECHECKS = 16
"""Most times, on average, a page's lines are checked against a block's columns again (as the
columns move) before the page is left as text: a table's columns settle within a few rows."""
_BLANK_LINES = re.compile(r"\n\s*\n")
_NUMBER = re.compile(r"[\d\s.,:;%$()+\-–]*\d[\d\s.,:;%$()+\-–]*")  # a cell of figures


@dataclass(frozen=True)
class Run:
    """A run of text as pypdf read it, where it starts on the page (points) and its font size."""

    index: int  # its place among the page's runs, newlines included
    text: str
    x: float
    y: float
    size: float

    @property
    def least_end(self) -> float:
        return self.x + CHAR_WIDTH * self.size * len(self.text)


@dataclass
class PageTables:
    """A page's tables, each a list of row lines (cells joined by " | ", the header first),
    and the page's text without them."""

    text: str
    tables: list[list[str]]


class PageRuns:
    """The `visitor_text` given to pypdf's `extract_text`: keeps each run and its place."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.runs: list[Run] = []

    def __call__(self, text: str, cm: list[float], tm: list[float], font: object, size: float) -> None:
        index = len(self.pieces)
        self.pieces.append(text)
        if not text.strip():
            return
        # The text matrix times the current transformation matrix places the run on the page.
        x = tm[4] * cm[0] + tm[5] * cm[2] + cm[4]
        y = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]
        scale = abs((tm[0] * cm[0] + tm[1] * cm[2]) * (tm[2] * cm[1] + tm[3] * cm[3])
                    - (tm[0] * cm[1] + tm[1] * cm[3]) * (tm[2] * cm[0] + tm[3] * cm[2])) ** 0.5
        self.runs.append(Run(index, " ".join(text.split()), x, y, max(size * scale, 1.0)))

    def tables(self) -> PageTables | None:
        """The page's tables and its other text; None where it has none."""
        try:
            found = [(table, cells) for table, starts in _tables(_lines(self.runs))
                     if _terse(table) and _filled(cells := _cells(table, starts))]
        except UnsettledColumns:
            return None
        if not found:
            return None
        used = {run.index for table, _ in found for line in table for run in line}
        text = "".join(piece for i, piece in enumerate(self.pieces) if i not in used)
        rows = [[" | ".join(row) for row in cells] for _, cells in found]
        return PageTables(_BLANK_LINES.sub("\n", text), rows)


Line = list[Run]  # one line's runs, left to right


def _lines(runs: list[Run]) -> list[Line]:
    """The runs in lines, top to bottom: runs whose baselines lie within a third of a size."""
    lines: list[Line] = []
    for run in sorted(runs, key=lambda r: (-r.y, r.x)):
        if lines and abs(lines[-1][0].y - run.y) <= run.size / 3:
            lines[-1].append(run)
        else:
            lines.append([run])
    return [sorted(line, key=lambda r: r.x) for line in lines]


def _tables(lines: list[Line]) -> list[tuple[list[Line], list[float]]]:
    """The tables among the page's lines and where their columns start, each table with the
    wrapped cells' lines just above and below it (those with no first-column run)."""
    found = []
    for lo, hi in _blocks(lines):
        starts = _columns(lines[lo:hi]) or []
        while lo > 0 and _wraps(lines[lo - 1], lines[lo], starts):
            lo -= 1
        while hi < len(lines) and _wraps(lines[hi], lines[hi - 1], starts):
            hi += 1
        found.append((lines[lo:hi], starts))
    return found


def _blocks(lines: list[Line]) -> Iterator[tuple[int, int]]:
    """The tables among lines, as index ranges: each grows from a line of two or more runs to
    the next such line, with the single lines between, while all keep to columns."""
    multi = [i for i, line in enumerate(lines) if len(line) >= 2]
    checks = _Checks(RECHECKS * len(lines))
    lo = last = block = None
    for n, i in enumerate(multi):
        # Up to two lines further: a centred header alone puts a column's start too far right
        # until the rows below it bring it back.
        if block is not None and (_apart(lines[last:i + 1]) or not any(block.columned(j) for j in multi[n:n + 3])):
            yield from _table_block(lines, lo, last + 1)
            block = None
        if block is None:
            lo, block = i, _Block(lines, i, checks)
        last = i
    if block is not None:
        yield from _table_block(lines, lo, last + 1)


def _apart(lines: list[Line]) -> bool:
    """Two lines in a row further apart than three sizes: no table's rows are (a running
    footer of two runs below a table is not its last row)."""
    return any(upper[0].y - lower[0].y > 3 * max(upper[0].size, lower[0].size)
               for upper, lower in pairwise(lines))


class UnsettledColumns(IngestError):
    """A page whose columns kept moving past its `_Checks`: its text is kept as it is (caught
    here, never the ingest's)."""


class _Checks:
    """The lines a page may check against moved columns again, in all (`RECHECKS` a line)."""

    def __init__(self, allowed: int) -> None:
        self.left = allowed

    def spend(self, lines: int) -> None:
        self.left -= lines
        if self.left < 0:
            raise UnsettledColumns


class _Block:
    """Whether `lines[lo:j + 1]` keep to columns (`_columns`, and every line `_fits` them), for
    a block growing from `lo` as `j` grows: each line is counted into the columns once, and
    checked against them once while they stay where they are; when they move, the lines above
    are checked again, which `checks` bounds."""

    def __init__(self, lines: list[Line], lo: int, checks: _Checks) -> None:
        self.lines, self.lo, self.checks = lines, lo, checks
        self.end = lo  # lines[lo:end] are counted
        self.count: Counter[int] = Counter()  # lines of each number of runs (two or more)
        self.lows: dict[int, list[float]] = {}  # by number of runs: the least start of each run
        self.highs: dict[int, list[float]] = {}
        self.most = self.most_twice = 0  # most runs in a line; in two lines
        self.starts: list[float] | None = None  # the columns (`_columns`) of lines[lo:end]
        self.moved = True  # the columns must be found again
        self.checked: list[float] | None = None  # the columns lines[lo:fit_end] were checked against
        self.fit_end, self.misfit = lo, None  # the first line that did not fit them, if any
        self.known: dict[int, bool] = {}

    def columned(self, j: int) -> bool:
        if j not in self.known:  # asked in growing order: a j not known is past every one known
            self.known[j] = self._columned(j)
        return self.known[j]

    def _columned(self, j: int) -> bool:
        while self.end <= j:
            self._count(self.lines[self.end])
            self.end += 1
        starts = self._columns()
        if starts is None:
            return False
        if starts is not self.checked:  # the columns moved: every line above is checked again
            self.checks.spend(self.fit_end - self.lo)
            self.checked, self.fit_end, self.misfit = starts, self.lo, None
        while self.misfit is None and self.fit_end <= j:
            if not _fits(self.lines[self.fit_end], starts):
                self.misfit = self.fit_end
            self.fit_end += 1
        return self.misfit is None or self.misfit > j

    def _count(self, line: Line) -> None:
        runs = len(line)
        if runs < 2:
            return
        before = self.most_twice or self.most
        self.count[runs] += 1
        self.most = max(self.most, runs)
        if self.count[runs] >= 2:
            self.most_twice = max(self.most_twice, runs)
        lows, highs = self.lows.setdefault(runs, [r.x for r in line]), self.highs.setdefault(runs, [r.x for r in line])
        moved = False
        for k, run in enumerate(line):
            if run.x < lows[k]:
                lows[k], moved = run.x, True
            elif run.x > highs[k]:
                highs[k], moved = run.x, True
        common = self.most_twice or self.most
        self.moved |= common != before or (runs == common and moved)

    def _columns(self) -> list[float] | None:
        if self.moved:
            self.moved = False
            common = self.most_twice or self.most
            lows, highs = self.lows[common], self.highs[common]
            if any(highs[k] >= lows[k + 1] for k in range(common - 1)):
                self.starts = None
            elif self.starts != lows:
                self.starts = list(lows)
        return self.starts


def _table_block(lines: list[Line], lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """lines[lo:hi] trimmed to its lines of two or more runs, where it is a table: three such
    lines or more, and keys (few words) in the first column."""
    multi = [i for i in range(lo, hi) if len(lines[i]) >= 2]
    if len(multi) < 3:
        return
    lo, hi = multi[0], multi[-1] + 1  # single lines about it are told apart by `_wraps`
    starts = _columns(lines[lo:hi]) or []
    keys = [" ".join(r.text for r in line if _column(r, starts) == 0) for line in lines[lo:hi]]
    words = [len(key.split()) for key in keys if key]
    if words and statistics.median(words) <= KEY_WORDS:
        yield lo, hi


def _wraps(line: Line, beside: Line, starts: list[float]) -> bool:
    """A single line beside a table that is part of a cell: nothing in the first column, within
    a line's height and a half, fitting the columns."""
    return (len(line) == 1 and _column(line[0], starts) > 0 and _fits(line, starts)
            and abs(line[0].y - beside[0].y) <= 1.5 * line[0].size)


def _columns(lines: list[Line]) -> list[float] | None:
    """Where each column starts: the least start of the k-th run over the lines holding the most
    runs that two lines hold (one line may hold a cell cut in two; a row whose tall cell wraps
    around its centred neighbours holds fewer); None where a column's runs do not all start
    before the next's."""
    counts = Counter(len(line) for line in lines if len(line) >= 2)
    common = max((n for n, times in counts.items() if times >= 2), default=max(counts))
    full = [line for line in lines if len(line) == common]
    lows = [min(line[k].x for line in full) for k in range(common)]
    highs = [max(line[k].x for line in full) for k in range(common)]
    if any(highs[k] >= lows[k + 1] for k in range(common - 1)):
        return None
    return lows


def _column(run: Run, starts: list[float]) -> int:
    """The last column starting at or before the run (within a point); 0 before the first.
    `starts` rise (`_columns` keeps them apart)."""
    return max(bisect.bisect_right(starts, run.x + 1.0) - 1, 0)


def _fits(line: Line, starts: list[float]) -> bool:
    """Each run ends before the next column starts (it does not run across it)."""
    for run in line:
        column = _column(run, starts)
        if column + 1 < len(starts) and run.least_end > starts[column + 1] + run.size:
            return False
    return True


def _terse(lines: list[Line]) -> bool:
    """Whether the lines read as cells, not as prose set in narrow columns (a Federal Register
    page's three columns line up as well as a table's): half their runs have `RUN_WORDS` words
    or fewer, where a column of prose runs six to ten words a line."""
    return statistics.median(len(run.text.split()) for line in lines for run in line) <= RUN_WORDS


def _filled(rows: list[list[str]]) -> bool:
    """Whether the columns were found cleanly: a header with every cell, and rows that leave a
    cell empty no more than a quarter of the time."""
    header, body = rows[0], rows[1:]
    gaps = sum(1 for row in body if not all(row))
    return (all(header) and not any(_NUMBER.fullmatch(cell) for cell in header)  # names, not data
            and len(body) >= 2 and gaps <= len(body) / 4
            and len({row[0] for row in body}) > 1)  # a title wrapped beside its label is no table


def _cells(lines: list[Line], starts: list[float]) -> list[list[str]]:
    """Rows of cells: each line with a first-column run (and the first line) starts a row; any
    other line joins the nearest of those."""
    anchors = [i for i, line in enumerate(lines) if i == 0 or _column(line[0], starts) == 0]
    members: dict[int, list[Line]] = {i: [] for i in anchors}
    first: dict[float, int] = {}  # each height an anchor starts at: the first anchor there
    for a in anchors:
        first.setdefault(lines[a][0].y, a)
    heights = sorted(first)
    for line in lines:  # the nearest anchor above or below; the first of two as near
        at = bisect.bisect_left(heights, line[0].y)
        near = [first[y] for y in heights[max(at - 1, 0):at + 1]]
        nearest = min(near, key=lambda a: (abs(lines[a][0].y - line[0].y), a))
        members[nearest].append(line)
    rows = []
    for anchor in anchors:
        cells: list[list[str]] = [[] for _ in starts]
        for line in sorted(members[anchor], key=lambda ln: -ln[0].y):
            for run in line:
                cells[_column(run, starts)].append(run.text)
        rows.append([" ".join(cell) for cell in cells])
    return rows
