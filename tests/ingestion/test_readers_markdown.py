"""Markdown files as read: a heading is a label of plain words, as the page renders it."""

from __future__ import annotations

from pathlib import Path

from crag.ingestion.readers import read_documents


def test_a_headings_inline_marks_are_left_out_of_its_label(tmp_path: Path) -> None:
    page = tmp_path / "guide.md"
    page.write_text("# *Pump* guide\n\nIntro.\n\n## **Partially** formatted to_escape `not_to_escape` "
                    "and [the manual](https://example.org)\n\nBody.\n", encoding="utf-8")
    documents = list(read_documents(page))
    assert documents[0].metadata["title"] == "Pump guide"
    assert documents[1].metadata["section"] == (
        "Pump guide / Partially formatted to_escape not_to_escape and the manual")
