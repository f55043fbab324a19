"""A table's row answers with its header: "Food: Berries; Calories per portion: 150"."""

from __future__ import annotations

from crag.steps.table_rows import WIDE, labelled_rows
from crag.text import terms


def test_a_row_between_bars_is_labelled_by_its_header_and_the_header_is_no_sentence() -> None:
    units = ["Intake per day.", "| Food | Calories per portion |", "| Berries | 150 |", "| Bread | 250 |"]
    assert labelled_rows(units) == [
        "Intake per day.", "Food: Berries; Calories per portion: 150", "Food: Bread; Calories per portion: 250",
    ]


def test_a_pdf_or_word_row_and_a_csv_record_are_labelled_alike() -> None:
    pdf = ["Food | Calories per portion", "Berries | 150"]
    csv = ["Food,Calories per portion", 'Berries,150', '"Nuts, salted",600']
    assert labelled_rows(pdf) == ["Food: Berries; Calories per portion: 150"]
    assert labelled_rows(csv, comma_separated=True) == [
        "Food: Berries; Calories per portion: 150", "Food: Nuts, salted; Calories per portion: 600",
    ]
    assert labelled_rows(csv) == csv  # commas in prose are no cells


def test_a_row_alone_or_of_another_width_is_left_as_it_is() -> None:
    units = ["Paultons Park | Home of Peppa Pig World", "It has 70 rides.", "a | b", "c | d | e"]
    assert labelled_rows(units) == units


def test_a_wide_row_keeps_its_first_column_and_those_the_question_names() -> None:
    header = ["Quarter", "Revenue", "Costs", "Staff", "Offices", "Profit"]
    assert len(header) > WIDE
    units = [" | ".join(header), "2025 Q1 | $210 | $150 | 12 | 3 | $60"]
    assert labelled_rows(units, asked=set(terms("What profit was made in 2025 Q1?"))) == ["Quarter: 2025 Q1; Profit: $60"]
    assert labelled_rows(units) == [
        "Quarter: 2025 Q1; Revenue: $210; Costs: $150; Staff: 12; Offices: 3; Profit: $60",
    ]


def test_an_empty_cell_is_left_out_and_an_unnamed_column_gives_its_cell_alone() -> None:
    assert labelled_rows(["| Calories", "Berries |", "Bread | 250"]) == ["Berries", "Bread; Calories: 250"]
