from crag.ingestion.formats.grid import spread


def test_a_cell_spanning_rows_and_columns_is_written_in_each_place_it_covers() -> None:
    rows = [[("Year", 1, 1), ("Quarter", 2, 1)], [("2025", 1, 2), ("Q1", 1, 1), ("$150", 1, 1)], [("Q2", 2, 1)]]
    assert spread(rows) == [["Year", "Quarter", "Quarter"], ["2025", "Q1", "$150"], ["2025", "Q2", "Q2"]]


def test_spans_copy_no_more_than_a_few_times_the_tables_own_text() -> None:
    cell = "x" * 1000
    rows = [[(cell, 1000, 1000)]] * 3 + [[("end", 1, 1)]] * 50
    copied = sum(len(text) + 3 for row in spread(rows) for text in row)
    assert copied <= 5 * (3 * 1003 + 50 * 6) + 10_000
