"""When a PDF's lines are read as a table, and when they stay the page's text: a table whose
columns were not found cleanly stays text, as found on the real-world set's government PDFs
(a title line for header, several figures to a cell, prose in narrow columns)."""

from __future__ import annotations

from crag.ingestion.formats.pdf_tables import Run, _filled, _terse


def line(y: float, *cells: str) -> list[Run]:
    return [Run(i, text, 72.0 + 120 * i, y, 10.0) for i, text in enumerate(cells)]


def test_a_table_with_named_columns_and_filled_rows_is_a_table() -> None:
    rows = [["Station", "Flow (l/s)", "Head (m)"], ["North", "10", "5"], ["South", "13.5", "6"]]
    assert _filled(rows)


def test_a_header_of_figures_or_with_gaps_is_a_fragment_not_a_table() -> None:
    assert not _filled([["Spain", "100 5 96 99", "97 96"], ["Sweden", "100 4", "97"], ["Chile", "1", "2"]])
    assert not _filled([["APPENDIX A", "", "HIGHLIGHTS"], ["Canada", "1,142", "23,206"], ["Chile", "1", "2"]])


def test_rows_that_leave_cells_empty_or_repeat_one_label_are_not_a_table() -> None:
    gaps = [["Country", "Schools", "Students"], ["Australia", "290", ""], ["Austria", "", "4,670"],
            ["Canada", "1,142", "23,206"]]
    assert not _filled(gaps)
    title = [["Table 4.", "Among recipients"], ["Table 4.", "borrowed for graduate"], ["Table 4.", "by characteristics"]]
    assert not _filled(title)


def test_prose_set_in_narrow_columns_is_not_terse_like_a_table() -> None:
    prose = [line(700 - 12 * n, "the agency estimates the following costs to", "comply with this proposed AD per airplane")
             for n in range(6)]
    cells = [line(700 - 12 * n, f"Station {n}", f"{n * 3.5:g}", "1970") for n in range(6)]
    assert not _terse(prose)
    assert _terse(cells)
