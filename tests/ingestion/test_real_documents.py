"""Documents as people have them, checked (issue 33): no file counts as read and gives nothing,
text is kept as people type it, and no answer shows where the files live. Every file is made
in its test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.paths import DOCUMENTS

import crag
from crag.app.cli import PARTIAL, main
from crag.ingestion.readers import read_documents

pytestmark = pytest.mark.usefixtures("no_config_file")

DATA = DOCUMENTS


@pytest.fixture
def make_fixtures(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - a module
    monkeypatch.syspath_prepend(str(DATA))
    import make_fixtures

    return make_fixtures


def ask(capsys: pytest.CaptureFixture[str], index: Path, question: str) -> dict:
    assert main(["ask", question, "--index", str(index), "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


# --- 1. nothing silent -------------------------------------------------------------------------


def test_a_line_on_every_page_of_a_pdf_with_nothing_else_is_its_text_not_a_running_header(
    tmp_path: Path, make_fixtures
) -> None:
    line = "Quarterly safety briefing: hard hats are worn on the loading dock."
    (tmp_path / "briefing.pdf").write_bytes(make_fixtures.pdf([[line]] * 4))
    pages = list(read_documents(tmp_path / "briefing.pdf"))
    assert [(d.metadata["page"], d.text) for d in pages] == [(str(n), line) for n in range(1, 5)]


def test_a_running_header_still_goes_where_the_pages_have_text_of_their_own(
    tmp_path: Path, make_fixtures
) -> None:
    header = "Lumen Energy internal"
    facts = ["The depot opens at six.", "Forklifts charge overnight.", "Visitors sign in at the gate."]
    (tmp_path / "report.pdf").write_bytes(make_fixtures.pdf([[header, fact] for fact in facts] + [[header]]))
    texts = [d.text for d in read_documents(tmp_path / "report.pdf")]
    assert texts == [*facts, header]


def test_a_file_with_no_text_is_named_counted_apart_and_read_again_at_the_next_ingest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "depot.md").write_text("The depot opens at six in the morning.\n", encoding="utf-8")
    (folder / "blank.txt").write_text("  \n\t\n", encoding="utf-8")
    index = tmp_path / "index"

    assert main(["ingest", str(folder), "--index", str(index), "--quiet"]) == PARTIAL
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"crag: empty: {folder / 'blank.txt'} has no text to index (empty, only "
                                "whitespace, or its text is in images); not recorded, so the next "
                                "ingest reads it again."]
    assert out.startswith("1 file(s) read, 0 unchanged, 1 empty, ")
    assert str((folder / "blank.txt").resolve()) not in crag.ChunkIndex.load(index).manifest

    report = crag.ingest([folder], index)  # not recorded: tried again, and still said
    assert (report.files_read, report.files_unchanged, report.files_empty) == (0, 1, 1)
    (folder / "blank.txt").write_text("The gate code is 4711.\n", encoding="utf-8")
    report = crag.ingest([folder], index)
    assert (report.files_read, report.files_unchanged, report.files_empty) == (1, 1, 0)


def test_a_file_emptied_since_the_last_ingest_takes_its_chunks_out_of_the_index(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "depot.md").write_text("The depot opens at six in the morning.\n", encoding="utf-8")
    (folder / "gate.md").write_text("The gate code is 4711.\n", encoding="utf-8")
    index = tmp_path / "index"
    crag.ingest([folder], index)
    (folder / "gate.md").write_text("\n", encoding="utf-8")

    report = crag.ingest([folder], index)
    assert (report.files_empty, report.chunks_total) == (1, 1)
    assert ["4711" not in n.get_content() for n in crag.ChunkIndex.load(index).nodes] == [True]


# --- 2. text as people type it -----------------------------------------------------------------


def test_text_and_questions_are_read_as_people_type_them() -> None:
    from crag.text import as_typed
    from crag.workflows.base import check_query

    assert as_typed("Oﬃcial Hausdorﬀ ﬁle ﬂow ﬀ ﬄ ﬅ ﬆ") == "Official Hausdorff file flow ff ffl st st"
    assert as_typed("Ｈｅｌｉｏ　Ｈ１０") == "Helio H10"  # full-width letters, digits and space
    assert as_typed("12\u00a0kW, de\u00adcla\u00adra\u00adtions, zero\u200bwidth") == "12 kW, declarations, zerowidth"
    assert check_query("  What is the oﬃcial\u00a0Hausdorﬀ dimension? ") == (
        "What is the official Hausdorff dimension?")


# --- 4. what readers missed --------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_a_csv_saved_as_utf16_or_utf32_is_read_by_its_byte_order_mark(tmp_path: Path, encoding: str) -> None:
    import codecs

    marks = {"utf-16": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE, "utf-32": codecs.BOM_UTF32_LE}
    table = "site,city,kwh\nDepot,Brno,120\nYard,Ostrava,85\n"
    body = table.encode("utf-16-le" if encoding == "utf-16" else "utf-32-le" if encoding == "utf-32" else encoding)
    (tmp_path / "sites.csv").write_bytes(marks[encoding] + body)
    (group,) = read_documents(tmp_path / "sites.csv")
    assert group.text == "site,city,kwh\n\nDepot,Brno,120\n\nYard,Ostrava,85"


def test_excel_unicode_text_is_a_tab_separated_utf16_table_whatever_its_suffix(tmp_path: Path) -> None:
    (tmp_path / "sites.csv").write_bytes("site\tcity\r\nDepot\tBrno\r\n".encode("utf-16"))  # with its mark
    (tmp_path / "notes.txt").write_bytes("Die Wärmepumpe läuft leise.\n".encode("utf-32"))
    assert [d.text for d in read_documents(tmp_path / "sites.csv")] == ["site\tcity\n\nDepot\tBrno"]
    assert [d.text for d in read_documents(tmp_path / "notes.txt")] == ["Die Wärmepumpe läuft leise.\n"]


def test_a_byte_order_mark_that_lies_is_one_line_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "odd.csv").write_bytes(b"\xff\xfea\x00b\x00\x00\xd8")  # a lone surrogate at the end
    with pytest.raises(crag.IngestError, match=r"odd.csv begins with a UTF-16 byte-order mark but is not UTF-16"):
        list(read_documents(tmp_path / "odd.csv"))


def test_a_slide_typed_whole_in_its_title_box_is_text_and_cited_by_a_short_label(tmp_path: Path) -> None:
    pptx = pytest.importorskip("pptx")
    words = ("The Helio H10 inverter shuts down above 55 degrees Celsius and restarts by itself once "
             "it has cooled below 45 degrees, which takes about twenty minutes in the shade; ") * 4
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])  # "Title Only"
    slide.shapes.title.text = words
    deck.save(tmp_path / "deck.pptx")
    (document,) = read_documents(tmp_path / "deck.pptx")
    section = document.metadata["section"]
    assert len(section) <= 80 and section.endswith("…") and words.startswith(section[:-1])
    assert "restarts by itself" in document.text  # the slide's text is kept whole


def test_a_word_heading_typed_with_a_tab_is_cited_on_one_line(tmp_path: Path) -> None:
    docx = pytest.importorskip("docx")
    document = docx.Document()
    document.add_heading("Installation", level=1)
    heading = document.add_heading("Wiring", level=2)
    heading.add_run().add_tab()
    heading.add_run("diagram\u00a0A")
    document.add_paragraph("Connect the red lead first.")
    document.save(tmp_path / "installer.docx")
    (part,) = read_documents(tmp_path / "installer.docx")
    assert part.metadata["section"] == "Installation / Wiring diagram A"


@pytest.mark.parametrize("algorithm", ["AES-128", "AES-256"])
def test_a_copy_protected_pdf_with_aes_and_no_password_to_open_it_is_read(
    tmp_path: Path, make_fixtures, algorithm: str
) -> None:
    import io

    import pypdf

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(make_fixtures.handbook())))
    writer.encrypt(user_password="", owner_password="only-the-publisher-knows", algorithm=algorithm,
                   permissions_flag=pypdf.constants.UserAccessPermissions.PRINT)  # no copying, no editing
    writer.write(tmp_path / "protected.pdf")
    assert pypdf.PdfReader(tmp_path / "protected.pdf").is_encrypted
    pages = list(read_documents(tmp_path / "protected.pdf"))
    assert [d.metadata["page"] for d in pages] == ["11", "12", "13"]
    assert make_fixtures.FACT in pages[1].text


# --- 6. tables kept as tables ------------------------------------------------------------------


def test_a_word_table_is_cut_into_groups_of_rows_each_led_by_its_header_and_a_row_is_cited(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    docx = pytest.importorskip("docx")
    cities = ["Brno", "Ostrava", "Plzen", "Olomouc", "Liberec", "Zlin", "Opava", "Kladno", "Most", "Jihlava",
              "Tabor", "Pisek", "Cheb", "Kolin", "Trutnov", "Prerov", "Znojmo", "Hodonin", "Decin", "Teplice"]
    document = docx.Document()
    document.add_heading("Depots", level=1)
    document.add_paragraph("Every depot and the size of its battery store.")
    table = document.add_table(rows=1, cols=3)
    for cell, name in zip(table.rows[0].cells, ["Depot", "City", "Battery store"]):
        cell.text = name
    for n, city in enumerate(cities, start=1):
        for cell, value in zip(table.add_row().cells, [f"D-{n:02}", city, f"{100 + 7 * n} kWh"]):
            cell.text = value
    folder = tmp_path / "docs"
    folder.mkdir()
    document.save(folder / "depots.docx")

    parts = list(read_documents(folder / "depots.docx"))
    assert parts[0].text == "Every depot and the size of its battery store."
    groups = parts[1:]
    assert len(groups) == 2 and all(g.text.startswith("Depot | City | Battery store\n\n") for g in groups)
    assert all(g.metadata["section"] == "Depots" for g in groups)
    assert sum(g.text.count(" kWh") for g in groups) == len(cities)  # every row, once

    assert main(["ingest", str(folder), "--index", str(tmp_path / "index"), "--quiet"]) == 0
    capsys.readouterr()
    answer = ask(capsys, tmp_path / "index", "How big is the battery store of the depot in Hodonin?")
    # A row is answered with its header: each value named by its column.
    assert "Depot: D-18; City: Hodonin; Battery store: 226 kWh" in answer["answer"]
    assert answer["sources"][0]["file"] == "depots.docx"
