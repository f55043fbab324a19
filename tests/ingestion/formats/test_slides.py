"""PowerPoint decks: a chart's title, series, categories and values are read as text (not left
as a picture), and so are grouped shapes and the speaker notes."""

from __future__ import annotations

from pathlib import Path

import pytest

from crag.ingestion.readers import read_documents

pptx = pytest.importorskip("pptx")  # the office extra


def test_a_chart_and_the_speaker_notes_are_read_with_the_slide(tmp_path: Path) -> None:
    from pptx.chart.data import CategoryChartData
    from pptx.enum.chart import XL_CHART_TYPE
    from pptx.util import Inches

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    slide.shapes.title.text = "Ducks counted"
    data = CategoryChartData()
    data.categories = ["2021", "2022"]
    data.add_series("Freshwater", (150, 170))
    data.add_series("Saltwater", (100, 110))
    frame = slide.shapes.add_chart(XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(1), Inches(6), Inches(4), data)
    frame.chart.has_title = True
    frame.chart.chart_title.text_frame.text = "Wild ducks by year"
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(6), Inches(3), Inches(1)).text_frame.text = "Counted in May"
    slide.notes_slide.notes_text_frame.text = "Say that 2022 was a record."
    deck.save(tmp_path / "ducks.pptx")

    (document,) = read_documents(tmp_path / "ducks.pptx")
    assert document.metadata["section"] == "Ducks counted" and document.metadata["slide"] == 1
    assert document.text == ("Wild ducks by year\n\nBar chart\n\n| Freshwater | Saltwater\n2021 | 150 | 100\n"
                             "2022 | 170 | 110\n\nCounted in May\n\nSay that 2022 was a record.")


def test_a_merged_cell_is_written_in_every_place_it_covers_and_numbered_items_keep_their_numbers(
        tmp_path: Path) -> None:
    from pptx.oxml.ns import qn
    from pptx.util import Inches

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[6])  # blank
    table = slide.shapes.add_table(3, 3, Inches(1), Inches(1), Inches(6), Inches(2)).table
    for (row, column), text in {(0, 0): "Year", (0, 1): "Quarter", (1, 0): "2025", (1, 1): "Q1",
                                (1, 2): "$150", (2, 1): "Q2", (2, 2): "$210"}.items():
        table.cell(row, column).text = text
    table.cell(0, 1).merge(table.cell(0, 2))  # "Quarter" over two columns
    table.cell(1, 0).merge(table.cell(2, 0))  # "2025" down two rows
    steps = slide.shapes.add_textbox(Inches(1), Inches(4), Inches(4), Inches(2)).text_frame
    steps.text = "Steps:"
    for text in ("Open the lid", "Drain the tank"):
        paragraph = steps.add_paragraph()
        paragraph.text = text
        paragraph._p.get_or_add_pPr().append(paragraph._p.makeelement(qn("a:buAutoNum"), {"type": "arabicParenR"}))
    deck.save(tmp_path / "sales.pptx")

    (document,) = read_documents(tmp_path / "sales.pptx")
    assert document.text.split("\n\n") == [
        "Year | Quarter | Quarter", "2025 | Q1 | $150", "2025 | Q2 | $210", "Steps:", "1) Open the lid", "2) Drain the tank"]
