"""Finding a PDF page's tables costs work in proportion to its runs (issue 40): one page of
4,000 rows took 14.6 s, 32,000 over two minutes, as each block was checked again from its top at
every line. Work is counted as the Python lines the module runs, never as time."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType

import pytest

from crag.ingestion.formats import pdf_tables
from crag.ingestion.formats.pdf_tables import PageRuns


def page(rows: int, drift: float = 0.0) -> PageRuns:
    """A page holding one table of `rows` rows under a header, three columns; each row's first
    cell `drift` points left of the one above (a table whose columns never settle)."""
    runs = PageRuns()
    cells = [("Station", "Flow (l/s)", "Commissioned")] + [(f"S{n}", f"{n * 3.5:g}", str(1970 + n % 50))
                                                              for n in range(rows)]
    for number, row in enumerate(cells):
        y = 20.0 + 12 * (len(cells) - number)
        for column, (text, x) in enumerate(zip(row, (300.0 - drift * number, 400.0, 500.0), strict=True)):
            runs(text, [1, 0, 0, 1, 0, 0], [1, 0, 0, 1, x, y], None, 9.0)
            runs("\n" if column == 2 else " ", [1, 0, 0, 1, 0, 0], [1, 0, 0, 1, x, y], None, 9.0)
    return runs


def work(find: Callable[[], object]) -> int:
    """The lines of crag.ingestion.formats.pdf_tables that `find()` runs."""
    count = 0
    source = pdf_tables.__file__

    def local(frame: FrameType, event: str, arg: object) -> object:
        nonlocal count
        count += event == "line"
        return local

    def calls(frame: FrameType, event: str, arg: object) -> object:
        return local if frame.f_code.co_filename == source else None

    before = sys.gettrace()
    sys.settrace(calls)
    try:
        find()
    finally:
        sys.settrace(before)
    return count


def test_a_page_of_one_long_table_is_found_whole() -> None:
    found = page(300).tables()
    assert found is not None and len(found.tables) == 1
    assert found.tables[0][:2] == ["Station | Flow (l/s) | Commissioned", "S0 | 0 | 1970"]
    assert len(found.tables[0]) == 301


@pytest.mark.parametrize("drift", [0.0, 0.05], ids=["steady columns", "columns that keep moving"])
def test_twice_the_rows_take_about_twice_the_work(drift: float) -> None:
    small, large = (work(page(rows, drift).tables) for rows in (300, 600))
    assert large / small < 2.3, (small, large)  # quadratic work would be ~4 times as much


def test_a_page_whose_columns_keep_moving_keeps_its_text() -> None:
    assert page(600, drift=0.05).tables() is None
