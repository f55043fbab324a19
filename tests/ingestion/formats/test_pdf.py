"""PDF pages as a reader wants them (issue 40): a book's alternating running headers dropped,
and the ligature mender never the reason a page pypdf reads is lost."""

from __future__ import annotations

import io
import string
from pathlib import Path

import pytest
from support.paths import DOCUMENTS

from crag.ingestion.formats import pdf_fonts
from crag.ingestion.readers import read_documents


def _pdf(folder: Path, monkeypatch: pytest.MonkeyPatch, pages: list[list[str]]) -> Path:
    monkeypatch.syspath_prepend(str(DOCUMENTS))
    import make_fixtures

    path = folder / "book.pdf"
    path.write_bytes(make_fixtures.pdf(pages))
    return path


def test_a_books_alternating_running_headers_are_not_glued_to_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left-hand pages carry the book's title, right-hand ones the chapter's: each is on half
    the pages, and both are headers."""
    bodies = ["Masks hide the values.", "Permissions filter the rows.", "QSECOFR holds all rights.",
              "Groups share one profile.", "Audits log each change.", "Views join the tables."]
    pages = [[f"{n} Row and Column Access Control Support" if n % 2 == 0 else
              f"Chapter 2. Roles and separation of duties {n}", body]
             for n, body in enumerate(bodies, 10)]
    texts = [d.text for d in read_documents(_pdf(tmp_path, monkeypatch, pages))]
    assert texts == bodies


def _pdf_with_a_long_glyph_name(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PDF whose font names code 28 `/fi` (its map gives it only "i") and code 29 with a
    300-letter name of single letters joined by "_", the shape of a ligature's name."""
    import pypdf
    from pypdf.generic import (
        ArrayObject,
        DecodedStreamObject,
        DictionaryObject,
        NameObject,
        NumberObject,
    )

    plain = _pdf(folder, monkeypatch, [["A signi\x1ccant \x1crst result."]]).read_bytes()
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(plain)))
    font = writer.pages[0]["/Resources"]["/Font"]["/F1"].get_object()
    long_name = "/" + "_".join((string.ascii_lowercase * 12)[:300])
    font[NameObject("/Encoding")] = DictionaryObject({
        NameObject("/BaseEncoding"): NameObject("/WinAnsiEncoding"),
        NameObject("/Differences"): ArrayObject([NumberObject(28), NameObject("/fi"), NameObject(long_name)]),
    })
    cmap = DecodedStreamObject()
    cmap.set_data(b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n1 begincodespacerange\n"
                  b"<00> <ff>\nendcodespacerange\n2 beginbfrange\n<1c> <1d> <0069>\nendbfrange\n"
                  b"1 beginbfrange\n<20> <7e> <0020>\nendbfrange\nendcmap\nend end\n")
    font[NameObject("/ToUnicode")] = writer._add_object(cmap)
    path = folder / "long-name.pdf"
    with path.open("wb") as out:
        writer.write(out)
    assert "A signiicant irst result." in pypdf.PdfReader(path).pages[0].extract_text()  # pypdf reads it
    return path


def test_a_glyph_name_of_300_letters_does_not_make_the_pdf_unreadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [page] = read_documents(_pdf_with_a_long_glyph_name(tmp_path, monkeypatch))
    assert page.text == "A significant first result."


def test_a_map_the_mender_made_that_pypdf_refuses_is_read_as_the_font_gives_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the mender gets wrong, the page is read with the font's own map."""
    path = _pdf_with_a_long_glyph_name(tmp_path, monkeypatch)
    monkeypatch.setattr(pdf_fonts, "_LONGEST", 1000)  # the 300 letters go into the map; pypdf refuses it
    [page] = read_documents(path)
    assert page.text == "A signiicant irst result."
