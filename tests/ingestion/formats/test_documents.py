"""Your documents as they are: PDF, Word, PowerPoint, notebooks and tables are read with the
place of every passage (page, section, slide, cell, rows), cited by it, and a file that cannot
be read is one line saying why while everything else goes in.

The fixtures are written by tests/data/documents/make_fixtures.py and committed.
"""

from __future__ import annotations

import io
import json
import shutil
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.paths import DOCUMENTS

import crag
from crag.app.cli import PARTIAL, main
from crag.ingestion.formats.pdf import drop_running_lines, join_hyphenated
from crag.ingestion.readers import read_documents

pytestmark = pytest.mark.usefixtures("no_config_file")

DATA = DOCUMENTS
GOOD, BAD = DATA / "good", DATA / "bad"


def documents(name: str) -> list:
    return list(read_documents(GOOD / name))


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    index = tmp_path_factory.mktemp("documents") / "index"
    report = crag.ingest([GOOD], index)
    assert report.files_read == 6 and not report.skipped
    return index


def ask(capsys: pytest.CaptureFixture[str], index: Path, question: str) -> dict:
    assert main(["ask", question, "--index", str(index), "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


# --- each format: its text, and where each piece came from ---------------------------------------


def test_a_pdf_is_one_document_per_page_labelled_as_the_pdf_numbers_its_pages() -> None:
    pages = documents("handbook.pdf")
    assert [d.metadata["page"] for d in pages] == ["11", "12", "13"]  # /PageLabels starts at 11
    assert "The Helio H10 inverter shuts down above 55 degrees Celsius." in pages[1].text
    assert all(d.metadata["file_name"] == "handbook.pdf" for d in pages)
    assert pages[0].metadata["title"] == "Helio H10 Owner's Handbook"  # the PDF's own title


def test_a_pdf_page_loses_its_running_header_and_footer_and_joins_hyphenated_words() -> None:
    text = documents("handbook.pdf")[1].text
    assert "Owner's Handbook" not in text and "Page 2 of 3" not in text
    assert "when the installation was done" in text


def test_running_lines_are_those_on_most_pages_whatever_their_page_number() -> None:
    bodies = ["Charge it.", "Mount it.", "Wire it.", "Clean it."]
    pages = [f"ACME manual\n{body}\nPage {n}" for n, body in enumerate(bodies, 1)] + ["ACME rules."]
    assert drop_running_lines(pages) == [*bodies, "ACME rules."]
    assert drop_running_lines(["A\nx", "A\ny"]) == ["A\nx", "A\ny"]  # two pages: nothing is "most"
    assert join_hyphenated("declara-\ntions and Wi-\nFi") == "declarations and Wi-\nFi"


def test_a_word_document_is_cut_at_its_headings_and_each_part_keeps_its_heading_path() -> None:
    parts = documents("installer.docx")
    assert [d.metadata.get("section") for d in parts] == [
        None, "Installation", "Installation / Wiring", "Installation / Wiring", "Maintenance"]
    assert parts[0].metadata["title"] == "Installer guide"  # the Title style, not the file name
    assert "16 square millimetres" in parts[2].text
    assert parts[3].text == "Cable | Section\n\nMains | 16 mm2"  # a table: its header, then a row a line
    assert not any("Installation" in d.text for d in parts)  # headings are metadata, not text


def test_a_slide_deck_is_one_document_per_slide_with_its_number_and_title() -> None:
    slides = documents("launch.pptx")
    assert [(d.metadata["slide"], d.metadata["section"]) for d in slides] == [
        (1, "Helio H10 launch"), (2, "Pricing"), (3, "Roadmap")]
    assert slides[1].text == "The Helio H10 costs 4,900 euros before subsidies."


def test_a_notebook_is_one_document_per_cell_numbered_as_in_jupyter() -> None:
    cells = documents("notebook.ipynb")
    assert [d.metadata["cell"] for d in cells] == [1, 2, 4]  # cell 3 is empty
    assert cells[0].metadata["title"] == "Battery analysis"
    assert cells[1].metadata["cell_type"] == "code" and "import statistics" in cells[1].text


def test_an_epub_is_one_document_per_chapter_titled_by_its_table_of_contents_or_heading() -> None:
    chapters = documents("book.epub")
    # The nav document titles chapter 1, the NCX chapter 2; chapter 3 has only its <h1>.
    assert [d.metadata["section"] for d in chapters] == ["Getting started", "Charge cycles", "Recycling"]
    assert chapters[1].text == "The Helio H10 keeps 80 percent of its capacity after 6,000 cycles."
    assert {d.metadata["title"] for d in chapters} == {"Living with the Helio H10"}  # dc:title


def test_an_epub_whose_table_of_contents_is_not_xml_keeps_the_chapters_headings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(DATA))
    import make_fixtures

    book = tmp_path / "book.epub"
    book.write_bytes(make_fixtures.epub({"OEBPS/nav.xhtml": "<html><p>&nbsp;<br></html>",
                                         "OEBPS/toc.ncx": "not xml"}))
    assert [d.metadata["section"] for d in read_documents(book)] == ["Welcome", "Cycles", "Recycling"]


def _pdf_whose_map_drops_ligatures(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PDF as some government PDFs are: its font names code 28 `/fi` and 29 `/T_h`, and its
    `/ToUnicode` map gives them only their last letter ("i", "h")."""
    import pypdf
    from pypdf.generic import (
        ArrayObject,
        DecodedStreamObject,
        DictionaryObject,
        NameObject,
        NumberObject,
    )

    monkeypatch.syspath_prepend(str(DATA))
    import make_fixtures

    plain = make_fixtures.pdf([["\x1de signi\x1ccant \x1crst result: a \x1cnal yield of 9.2 tonnes."]])
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(plain)))
    font = writer.pages[0]["/Resources"]["/Font"]["/F1"].get_object()
    font[NameObject("/Encoding")] = DictionaryObject({
        NameObject("/BaseEncoding"): NameObject("/WinAnsiEncoding"),
        NameObject("/Differences"): ArrayObject([NumberObject(28), NameObject("/fi"), NameObject("/T_h")]),
    })
    cmap = DecodedStreamObject()
    cmap.set_data(b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n1 begincodespacerange\n"
                  b"<00> <ff>\nendcodespacerange\n2 beginbfrange\n<1c> <1c> <0069>\n<1d> <1d> <0068>\n"
                  b"endbfrange\n1 beginbfrange\n<20> <7e> <0020>\nendbfrange\nendcmap\nend end\n")
    font[NameObject("/ToUnicode")] = writer._add_object(cmap)
    path = folder / "yield.pdf"
    with path.open("wb") as out:
        writer.write(out)
    assert "signiicant irst" in pypdf.PdfReader(path).pages[0].extract_text()  # as pypdf reads the map
    return path


def test_a_pdf_whose_own_map_drops_a_ligatures_letters_reads_as_its_glyphs_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [page] = read_documents(_pdf_whose_map_drops_ligatures(tmp_path, monkeypatch))
    assert page.text == "The significant first result: a final yield of 9.2 tonnes."


def test_mending_ligatures_survives_a_form_that_contains_itself_and_junk_in_the_glyph_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pypdf
    from pypdf.generic import (
        ArrayObject,
        DictionaryObject,
        FloatObject,
        NameObject,
        TextStringObject,
    )

    from crag.ingestion.formats.pdf_fonts import ligature_text, mend_ligatures

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(_pdf_whose_map_drops_ligatures(tmp_path, monkeypatch)))
    resources = writer.pages[0]["/Resources"]
    font = resources["/Font"]["/F1"].get_object()
    font["/Encoding"][NameObject("/Differences")] = ArrayObject(
        [FloatObject(3.5), TextStringObject("junk"), *font["/Encoding"]["/Differences"]])
    form = DictionaryObject({NameObject("/Type"): NameObject("/XObject"), NameObject("/Subtype"): NameObject("/Form"),
                             NameObject("/Resources"): resources})  # a form whose resources hold the form
    resources[NameObject("/XObject")] = DictionaryObject({NameObject("/X1"): writer._add_object(form)})
    path = tmp_path / "loop.pdf"
    with path.open("wb") as out:
        writer.write(out)

    assert mend_ligatures(pypdf.PdfReader(path)) == 1
    [page] = read_documents(path)
    assert page.text == "The significant first result: a final yield of 9.2 tonnes."
    assert [ligature_text(n) for n in ("/fi", "/f_f_l", "/T_h", "/uni00A0", "/a_bc", "/f")] == [
        "fi", "ffl", "Th", None, None, None]


def test_a_question_naming_a_books_author_is_answered_from_the_chapter_not_the_title_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The author (dc:creator) is what every chapter is by, as the title is what it is in: a
    question that names the author is not drawn to the one page that prints the name."""
    from crag.config import Settings
    from crag.workflows.factory import build_workflow

    monkeypatch.syspath_prepend(str(DATA))
    import make_fixtures

    page = '<html xmlns="http://www.w3.org/1999/xhtml"><body><h1>{}</h1><p>{}</p></body></html>'
    chapters = {"text/intro.xhtml": ("Title page", "The Devil Dictionary. By Ambrose Bierce."),
                "text/cycles.xhtml": ("C", "Cynic: a blackguard whose faulty vision sees things as they are."),
                "text/recycling.xhtml": ("D", "Dawn: the time when men of reason go to bed.")}
    book = tmp_path / "books" / "dictionary.epub"
    book.parent.mkdir()
    book.write_bytes(make_fixtures.epub({
        "OEBPS/content.opf": make_fixtures.epub_package(creators=["Ambrose  Bierce"]),
        "OEBPS/nav.xhtml": "<html></html>", "OEBPS/toc.ncx": "<ncx></ncx>",  # titled by their headings
        **{f"OEBPS/{name}": page.format(*chapter) for name, chapter in chapters.items()},
    }))

    assert {d.metadata["author"] for d in read_documents(book)} == {"Ambrose Bierce"}
    crag.ingest([book.parent], tmp_path / "index")
    workflow = build_workflow(Settings.load(env={}, index={"path": tmp_path / "index"}, web_search={"kind": "none"}))
    result = workflow.ask("What is a cynic according to Ambrose Bierce?")
    assert result.answer.startswith("Cynic: a blackguard"), result.answer
    assert result.sources[0].section == "C"


def text_of(path: Path, written: str) -> str:
    """What crag reads of a one-document file holding `written`."""
    path.write_text(written, encoding="utf-8")
    [document] = read_documents(path)
    return document.text


def test_an_html_page_reads_as_a_browser_shows_it_whatever_its_markup_indentation(tmp_path: Path) -> None:
    assert text_of(tmp_path / "glossary.html", (
        "<html>\n\t<body>\n\t\t<dl>\n\t\t\t<dt>\n\t\t\t\tCynic\n\t\t\t</dt>\n\t\t\t<dd>\n"
        "\t\t\t\t<p>One who sees things\n\t\t\t\tas they <i>are</i>.</p>\n\t\t\t</dd>\n\t\t</dl>\n"
        "\t\t<table><tr><td>volts</td><td>12</td></tr></table>\n"
        "\t\t<pre>def f():\n\n    return 1</pre>\n\t</body>\n</html>\n"
    )) == "Cynic: One who sees things as they are.\n\nvolts | 12\n\ndef f():\n\n    return 1"


def test_a_definition_lists_term_leads_its_definition_in_one_paragraph(tmp_path: Path) -> None:
    """As a glossary is read: apart, the sentence that defines a word would never name it."""
    assert text_of(tmp_path / "glossary.html", (
        "<dl><dt><dfn>Dawn</dfn></dt>\n<dd>\n<p>The time when men of reason go to bed.</p><p>Also a name.</p></dd>"
        "<dt>Ghost</dt><dt>Spectre:</dt><dd>An outward sign of an inward fear.</dd>"
        "<dt>Zenith</dt><dd></dd><dt>Zeal</dt></dl><p>The end.</p>"
    )).split("\n\n") == [
        "Dawn: The time when men of reason go to bed.", "Also a name.", "Ghost",
        "Spectre: An outward sign of an inward fear.", "Zenith", "Zeal", "The end."]


def test_raw_html_in_markdown_is_left_out_and_html_in_code_is_kept(tmp_path: Path) -> None:
    assert text_of(tmp_path / "README.md", (
        '<a href="https://example.org/data"><img src="https://example.org/badge.svg" alt="badge" /></a>\n\n'
        "CO2 data, <b>monthly</b>.<br/> Use the `<br>` tag for a break. <!-- to do -->\n\n"
        "```\n<div>kept in a fence</div>\n```\n"
    )) == "CO2 data, monthly. Use the `<br>` tag for a break. \n\n```\n<div>kept in a fence</div>\n```"


def test_a_table_is_cut_into_groups_of_rows_each_starting_with_the_header_line() -> None:
    groups = documents("sites.csv")
    assert len(groups) > 1
    assert all(d.text.startswith("site,city,installed_kwh,inverter\n") for d in groups)
    spans = [tuple(map(int, d.metadata["rows"].split("-"))) for d in groups]
    assert spans[0][0] == 2 and spans[-1][1] == 43  # line 1 is the header; 42 rows follow
    assert all(b[0] == a[1] + 1 for a, b in pairwise(spans))  # every row once, in order


def test_every_chunk_carries_its_place_which_is_kept_out_of_the_text_a_model_reads(index_dir: Path) -> None:
    chunks = crag.ChunkIndex.load(index_dir).nodes
    by_file = {n.metadata["file_name"] for n in chunks}
    assert by_file == {"book.epub", "handbook.pdf", "installer.docx", "launch.pptx", "notebook.ipynb", "sites.csv"}
    table = [n for n in chunks if n.metadata["file_name"] == "sites.csv"]
    assert all(n.get_content().startswith("site,city") for n in table)  # no group was cut in two
    from llama_index.core.schema import MetadataMode

    page = next(n for n in chunks if n.metadata.get("page") == "12")
    for mode in (MetadataMode.EMBED, MetadataMode.LLM):
        assert "page: 12" not in page.get_content(mode) and "handbook.pdf" not in page.get_content(mode)


# --- citations ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "fields", "citation"),
    [
        ("At what temperature does the inverter shut down?",
         {"file": "handbook.pdf", "page": "12"}, "handbook.pdf, p. 12"),
        ("What cable is used for the mains feed?",
         {"file": "installer.docx", "section": "Installation / Wiring"}, "installer.docx (Installation / Wiring)"),
        ("How much does the Helio H10 cost before subsidies?",
         {"file": "launch.pptx", "slide": 2, "section": "Pricing"}, "launch.pptx, slide 2 (Pricing)"),
        ("What was the median battery temperature over the year?",
         {"file": "notebook.ipynb", "cell": 4}, "notebook.ipynb, cell 4"),
        ("Which site is in Zwolle?", {"file": "sites.csv", "rows": "2-22"}, "sites.csv, rows 2-22"),
        ("How much capacity does the Helio H10 keep after 6,000 cycles?",
         {"file": "book.epub", "section": "Charge cycles"}, "book.epub (Charge cycles)"),
    ],
    ids=["pdf", "docx", "pptx", "ipynb", "csv", "epub"],
)
def test_an_answer_cites_the_page_section_slide_cell_or_rows_it_came_from(
    capsys: pytest.CaptureFixture[str], index_dir: Path, question: str, fields: dict, citation: str
) -> None:
    source = ask(capsys, index_dir, question)["sources"][0]
    assert {key: source[key] for key in fields} == fields
    assert main(["ask", question, "--index", str(index_dir), "--quiet"]) == 0
    assert f"[1] internal: {citation}\n" in capsys.readouterr().out


@pytest.mark.parametrize(("name", "text", "citation"), [
    ("warranty.md", "# Warranty\n\n## Claims\n\nClaims go through the installer.\n",
     "warranty.md (Warranty / Claims)"),
    ("care.html", "<title>Care</title><p>Wipe the panel dry.</p>", "care.html"),
    ("notes.txt", "Check the fuse yearly.", "notes.txt"),
])
def test_markdown_html_and_text_are_cited_and_linked_by_their_file_as_every_document_is(
    tmp_path: Path, name: str, text: str, citation: str
) -> None:
    from crag.trace import Location

    path = tmp_path / name
    path.write_text(text)
    (document,) = read_documents(path)
    where = Location(**Location.fields(document.metadata))
    assert where.citation() == citation and where.file_id and document.id_ == where.file_id


# --- files that cannot be read ------------------------------------------------------------------

REASONS = {
    "encrypted.pdf": "encrypted.pdf is encrypted (it needs a password)",
    "scanned.pdf": "scanned.pdf has no text layer (a scanned or image-only PDF); ",
    "truncated.pdf": "truncated.pdf is not a readable PDF (damaged or truncated",
    "empty.pdf": "empty.pdf is empty (0 bytes)",
    "not-a-zip.docx": "not-a-zip.docx is not a Word document (not a zip archive",
    "broken.ipynb": "broken.ipynb is not a readable notebook (broken JSON at line",
    "mixed.csv": "mixed.csv is not UTF-8 text (byte 0xe1 on line 3",
    "not-a-zip.epub": "not-a-zip.epub is not an EPUB (not a zip archive",
    "no-package.epub": "no-package.epub is a zip archive but not a readable EPUB (its package file "
                       "OEBPS/missing.opf is missing)",
}


def test_each_bad_file_is_one_line_with_its_reason_and_every_other_file_goes_in(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "mixed"
    shutil.copytree(GOOD, folder)
    shutil.copytree(BAD, folder, dirs_exist_ok=True)
    assert main(["ingest", str(folder), "--index", str(tmp_path / "index"), "--quiet"]) == PARTIAL == 3
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == len(REASONS) and "Traceback" not in captured.err
    for name, reason in REASONS.items():
        assert sum(reason in line and line.startswith("crag: skipped: ") for line in lines) == 1, name
    assert captured.out.startswith("6 file(s) read, 0 unchanged, 9 skipped, ")
    files = {n.metadata["file_name"] for n in crag.ChunkIndex.load(tmp_path / "index").nodes}
    assert files == {"book.epub", "handbook.pdf", "installer.docx", "launch.pptx", "notebook.ipynb", "sites.csv"}


@pytest.mark.parametrize("name", sorted(REASONS))
def test_a_bad_file_alone_is_an_error_and_the_index_is_as_it_was(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    index = tmp_path / "index"
    crag.ingest([GOOD / "notebook.ipynb"], index)
    before = [n.node_id for n in crag.ChunkIndex.load(index).nodes]
    assert main(["ingest", str(BAD / name), "--index", str(index), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error: ") and err.count("\n") == 1 and REASONS[name] in err
    assert [n.node_id for n in crag.ChunkIndex.load(index).nodes] == before


def test_only_bad_files_is_one_error_naming_each(tmp_path: Path) -> None:
    with pytest.raises(crag.IngestError, match="None of the 2 files could be read: .*empty.pdf.*mixed.csv"):
        crag.ingest([BAD / "empty.pdf", BAD / "mixed.csv"], tmp_path / "index")
    assert not (tmp_path / "index").exists()


def test_a_pptx_without_the_office_extra_names_the_install_that_fixes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pptx", None)  # as if python-pptx were not installed
    with pytest.raises(crag.IngestError, match=r"launch.pptx: reading .pptx needs the office extra: "
                       r"pip install 'crag-workflows\[office\]'"):
        documents("launch.pptx")


# --- ingesting again ----------------------------------------------------------------------------


def test_an_unchanged_pdf_is_not_read_again_and_a_skipped_file_is_tried_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(GOOD / "handbook.pdf", folder)
    shutil.copy(BAD / "truncated.pdf", folder)
    index = tmp_path / "index"
    assert crag.ingest([folder], index).files_skipped == 1
    from crag.ingestion.formats import pdf

    def refuse(*args: object) -> None:
        raise AssertionError("an unchanged PDF was read again")

    monkeypatch.setattr(pdf, "_extract", refuse)
    (folder / "truncated.pdf").unlink()
    report = crag.ingest([folder], index)
    assert (report.files_read, report.files_unchanged, report.files_skipped) == (0, 1, 0)
    monkeypatch.undo()
    shutil.copy(GOOD / "handbook.pdf", folder / "truncated.pdf")  # fixed: it goes in now
    assert crag.ingest([folder], index).files_read == 1


# --- any bytes at all -----------------------------------------------------------------------------

SAMPLES = {p.suffix: p.read_bytes() for p in sorted(GOOD.iterdir())}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(suffix=st.sampled_from(sorted({*SAMPLES, ".tsv"})), data=st.data())
def test_any_damage_to_a_document_is_documents_or_one_ingest_error(
    tmp_path: Path, suffix: str, data: st.DataObject
) -> None:
    """A good file cut short or with bytes overwritten, or bytes of no format at all: the
    reader gives Documents or an IngestError, never another exception."""
    good = SAMPLES.get(suffix, SAMPLES[".csv"].replace(b",", b"\t"))
    damage = data.draw(st.sampled_from(["cut", "overwrite", "random"]))
    if damage == "cut":
        content = good[: data.draw(st.integers(0, len(good)))]
    elif damage == "overwrite":
        at = data.draw(st.integers(0, len(good) - 1))
        content = good[:at] + data.draw(st.binary(min_size=1, max_size=64)) + good[at + 64:]
    else:
        content = data.draw(st.binary(max_size=512))
    path = tmp_path / f"damaged{suffix}"
    path.write_bytes(content)
    try:
        for document in read_documents(path):
            assert document.text.strip() and document.metadata["file_name"] == path.name
    except crag.IngestError as exc:
        assert "damaged" in str(exc) and "\n" not in str(exc)


# --- documents from llama-index readers -----------------------------------------------------------


def test_documents_from_simple_directory_reader_are_cited_by_file_and_not_embedded_twice(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from llama_index.core import SimpleDirectoryReader

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "valve.txt").write_text("The Zorblat valve opens at 7 bar of pressure.\n")
    (folder / "pump.md").write_text("# Pump\n\nThe Quenta pump moves 40 litres a minute.\n")
    index = tmp_path / "index"

    def load() -> list:
        return SimpleDirectoryReader(str(folder), filename_as_id=True).load_data()

    report = crag.ingest(documents=load(), index_dir=index)
    assert (report.documents, report.documents_unchanged) == (2, 0) and report.chunks_added >= 2
    source = ask(capsys, index, "At what pressure does the Zorblat valve open?")["sources"][0]
    assert source["file"] == "valve.txt" and source["page"] is None
    again = crag.ingest(documents=load(), index_dir=index)  # new objects, same ids and text
    assert (again.documents, again.documents_unchanged, again.chunks_added) == (0, 2, 0)
    (folder / "pump.md").write_text("# Pump\n\nThe Quenta pump moves 55 litres a minute.\n")
    changed = crag.ingest(documents=load(), index_dir=index)
    assert (changed.documents, changed.documents_unchanged) == (1, 1)
    texts = [n.get_content() for n in crag.ChunkIndex.load(index).nodes]
    assert any("55 litres" in t for t in texts) and not any("40 litres" in t for t in texts)


def test_a_documents_page_label_is_its_cited_page_beside_files_crag_reads_itself(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from llama_index.core.schema import Document

    page = Document(text="The Brimble relay trips after 30 milliseconds of overload.", id_="report.pdf_part_2",
                    metadata={"file_path": "/reports/report.pdf", "page_label": "3"})
    index = tmp_path / "index"
    report = crag.ingest([GOOD / "notebook.ipynb"], index, documents=[page])
    assert (report.files_read, report.documents) == (1, 4)  # three notebook cells and the page
    assert page.metadata == {"file_path": "/reports/report.pdf", "page_label": "3"}  # left as it was
    source = ask(capsys, index, "After how long does the Brimble relay trip?")["sources"][0]
    assert (source["file"], source["page"]) == ("report.pdf", "3")
    assert main(["ask", "After how long does the Brimble relay trip?", "--index", str(index), "--quiet"]) == 0
    assert "[1] internal: report.pdf, p. 3\n" in capsys.readouterr().out
    chunk = next(n for n in crag.ChunkIndex.load(index).nodes if n.ref_doc_id == "report.pdf_part_2")
    from llama_index.core.schema import MetadataMode

    assert "/reports" not in chunk.get_content(MetadataMode.EMBED)


def test_a_pdf_simple_directory_reader_read_as_bytes_is_skipped_and_no_answer_shows_its_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """SimpleDirectoryReader without llama-index-readers-file (crag does not need it) decodes a
    PDF's bytes as text, and its `filename_as_id` ids are the files' paths."""
    from llama_index.core import SimpleDirectoryReader

    folder = tmp_path / "shared-drive-5c1e"
    folder.mkdir()
    (folder / "handbook.pdf").write_bytes((GOOD / "handbook.pdf").read_bytes())
    (folder / "valve.txt").write_text("The Zorblat valve opens at 7 bar of pressure.\n")
    loaded = SimpleDirectoryReader(str(folder), filename_as_id=True).load_data()
    assert any(d.text.lstrip().startswith("%PDF-") for d in loaded)  # what the docs warn of
    index = tmp_path / "index"
    report = crag.ingest(documents=loaded, index_dir=index)
    assert report.documents == 1
    assert report.skipped == ["document handbook.pdf: its text is a PDF's raw bytes, not text; the reader "
                              "that made it cannot read this kind (SimpleDirectoryReader needs "
                              "llama-index-readers-file for PDFs and Office files), or pass the file's "
                              "path to crag.ingest, which reads it."]
    answer = ask(capsys, index, "At what pressure does the Zorblat valve open?")
    assert answer["sources"][0]["file"] == "valve.txt"
    assert folder.name not in json.dumps(answer)
    again = crag.ingest(documents=SimpleDirectoryReader(str(folder), filename_as_id=True).load_data(),
                        index_dir=index)
    assert again.documents_unchanged == 1  # the manifest still knows it by the id it was given


def test_only_raw_bytes_given_is_one_error_naming_them(tmp_path: Path) -> None:
    from llama_index.core.schema import Document

    raw = Document(text="%PDF-1.7\n%\u00e2\u00e3\n1 0 obj", id_="scan", metadata={"file_name": "scan.pdf"})
    with pytest.raises(crag.IngestError, match="document scan.pdf: its text is a PDF's raw bytes"):
        crag.ingest(documents=[raw], index_dir=tmp_path / "index")
    assert not (tmp_path / "index").exists()


def test_documents_that_are_not_documents_or_nothing_at_all_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(crag.IngestError, match="documents= takes llama-index Document objects, not str"):
        crag.ingest(documents=["just text"], index_dir=tmp_path / "index")
    with pytest.raises(crag.IngestError, match="Nothing to ingest"):
        crag.ingest(index_dir=tmp_path / "index")
    assert not (tmp_path / "index").exists()


# --- readers named in crag.toml -----------------------------------------------------------------

LOG_READER = '''
from pathlib import Path
from llama_index.core.schema import Document

def read_log(path: Path):
    for line in path.read_text().splitlines():
        if "ERROR" in line:
            yield Document(text=line.split("ERROR", 1)[1].strip(), metadata={"section": "errors"})

def read_all(path: Path) -> str:
    return path.read_text()

def broken(path: Path):
    raise ValueError("cannot parse line 3")
'''


@pytest.fixture
def log_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "myreaders.py").write_text(LOG_READER)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "app.log").write_text("INFO started\nERROR The Wumble cache overflowed at 3 gigabytes.\n")
    return folder


def test_a_reader_named_in_crag_toml_reads_its_suffix_and_is_cited_like_the_others(
    capsys: pytest.CaptureFixture[str], log_folder: Path, tmp_path: Path
) -> None:
    (tmp_path / "crag.toml").write_text('[ingest]\nreaders = { ".log" = "myreaders:read_log" }\n')
    index = tmp_path / "index"
    # Named: readers in a crag.toml found, not given, run only if allowed (tests/ingestion/test_custom.py).
    assert main(["--config", "crag.toml", "ingest", str(log_folder), "--index", str(index), "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("1 file(s) read, 0 unchanged, ")
    source = ask(capsys, index, "How big was the Wumble cache when it overflowed?")["sources"][0]
    assert (source["file"], source["section"]) == ("app.log", "errors")
    texts = [n.get_content() for n in crag.ChunkIndex.load(index).nodes]
    assert not any("started" in t for t in texts)  # only what the reader gave


def test_a_python_reader_may_give_text_and_one_that_fails_is_a_skipped_file(
    log_folder: Path, tmp_path: Path
) -> None:
    report = crag.ingest([log_folder], tmp_path / "a", readers={".log": "myreaders:read_all"})
    assert report.documents == 1
    import myreaders

    with pytest.raises(crag.IngestError, match=r"app.log: the reader .*broken failed \(ValueError: cannot parse line 3\)"):
        crag.ingest([log_folder], tmp_path / "b", readers={".log": myreaders.broken})


@pytest.mark.parametrize(("target", "reason"), [
    ("nosuchpackage.logs:read", r'ingest.readers: "\.log" = "nosuchpackage.logs:read": cannot import nosuchpackage.logs'),
    ("myreaders:missing", r'ingest.readers: "\.log" = "myreaders:missing": myreaders has no missing'),
])
def test_a_reader_that_cannot_be_imported_is_a_config_error_naming_it(
    capsys: pytest.CaptureFixture[str], log_folder: Path, tmp_path: Path, target: str, reason: str
) -> None:
    with pytest.raises(crag.ConfigError, match=reason):
        crag.ingest([log_folder], tmp_path / "index", readers={".log": target})
    (tmp_path / "crag.toml").write_text(f'[ingest]\nreaders = {{ ".log" = "{target}" }}\n')
    assert main(["ingest", str(log_folder), "--index", str(tmp_path / "index"), "--quiet", "--allow-readers"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error: ingest.readers: ") and err.count("\n") == 1 and target in err
    assert not (tmp_path / "index").exists()


def test_a_reader_setting_that_is_not_module_colon_function_is_refused_when_read(tmp_path: Path) -> None:
    with pytest.raises(crag.ConfigError, match='write the reader as \\\\"module:function\\\\"|module:function'):
        crag.Settings.load(None, env={}, ingest={"readers": {".log": "myreaders.read_log"}})
    with pytest.raises(crag.ConfigError, match="is not a file suffix"):
        crag.Settings.load(None, env={}, ingest={"readers": {"log": "m:f"}})


def test_a_pdf_outline_gives_each_page_its_heading_path(tmp_path: Path) -> None:
    import pypdf

    writer = pypdf.PdfWriter(clone_from=GOOD / "handbook.pdf")
    setup = writer.add_outline_item("Setup", 0)
    writer.add_outline_item("Wiring", 1, parent=setup)
    writer.add_outline_item("Safety", 2)
    outlined = tmp_path / "outlined.pdf"
    with open(outlined, "wb") as f:
        writer.write(f)
    pages = list(read_documents(outlined))
    assert [d.metadata.get("section") for d in pages] == ["Setup", "Setup / Wiring", "Safety"][: len(pages)]
    assert all("section" not in d.metadata for d in documents("handbook.pdf")), "no outline, no section"
