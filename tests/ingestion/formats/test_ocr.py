"""Scanned pages are read by OCR with the `ocr` extra (issue 33): a PDF with no text layer,
the scanned pages of a mixed one and image files become text cited by page and marked OCR;
without the extra such a PDF is one line naming the install command. Every scan is drawn in
its test with Pillow: sentences on a white page, saved as a PDF with no text layer.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont
from support.paths import DOCUMENTS

import crag
from crag import Settings, build_workflow
from crag.app.cli import PARTIAL, main
from crag.ingestion.files import ReadLimits
from crag.ingestion.formats import ocr
from crag.ingestion.readers import read_documents

pytestmark = pytest.mark.usefixtures("no_config_file")

DATA = DOCUMENTS
NOT_INSTALLED = "the ocr extra (tesserocr, tessdata) is not installed"
needs_engine = pytest.mark.skipif(not ocr.installed(), reason=NOT_INSTALLED)

PAGES = [
    ["Installing the Kestrel water pump.", "Mount the pump on a level concrete base."],
    ["The Kestrel pump must be primed with water before its first start.",
     "Its warranty covers four years from the date of purchase."],
    ["Service intervals for the Kestrel pump.", "Replace the seal every 3000 hours."],
]


def scan(lines: list[str]) -> Image.Image:
    """A page as a scanner at 200 dpi leaves it: the lines as pixels, and no text layer."""
    page = Image.new("L", (1400, 120 + 70 * len(lines)), 255)
    draw = ImageDraw.Draw(page)
    font = ImageFont.load_default(size=40)  # Pillow's own font: no system font needed
    for number, line in enumerate(lines):
        draw.text((80, 60 + 70 * number), line, font=font, fill=0)
    return page


def scanned_pdf(pages: list[list[str]]) -> bytes:
    images = [scan(lines) for lines in pages]
    out = io.BytesIO()
    images[0].save(out, "PDF", resolution=200, save_all=True, append_images=images[1:])
    return out.getvalue()


@pytest.fixture(scope="module")
def scanned_index(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple]]:
    """A folder holding a three-page scan, ingested; and the progress the ingest reported."""
    if not ocr.installed():
        pytest.skip(NOT_INSTALLED)
    folder = tmp_path_factory.mktemp("scans")
    (folder / "kestrel-scan.pdf").write_bytes(scanned_pdf(PAGES))
    reported: list[tuple[str, int, int]] = []
    report = crag.ingest([folder], folder / "index", progress=lambda *call: reported.append(call))
    assert report.files_read == 1 and not report.skipped and not report.empty
    return folder / "index", reported


@needs_engine
def test_a_scanned_pdf_is_read_by_ocr_and_the_answer_cites_its_page_marked_ocr(
    scanned_index: tuple[Path, list],
) -> None:
    settings = Settings.load(env={}, index={"path": scanned_index[0]})
    result = build_workflow(settings).ask("How many years does the Kestrel pump warranty cover?")
    assert "four years" in result.answer
    source = result.sources[0]
    assert (source.file, source.page, source.ocr) == ("kestrel-scan.pdf", "2", True)
    assert source.citation() == "kestrel-scan.pdf, p. 2, OCR"


@needs_engine
def test_each_scanned_page_read_is_reported_while_the_file_is_read(
    scanned_index: tuple[Path, list],
) -> None:
    pages = [call for call in scanned_index[1] if call[0] == "ocr"]
    assert pages == [("ocr", done, 3) for done in range(4)]


@needs_engine
def test_a_mixed_pdf_keeps_its_text_pages_as_they_are_and_reads_only_the_scanned_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pypdf

    monkeypatch.syspath_prepend(str(DATA))
    import make_fixtures

    typed = make_fixtures.pdf([["The depot opens at six."], ["Forklifts charge overnight."]])
    writer = pypdf.PdfWriter()
    writer.append(pypdf.PdfReader(io.BytesIO(typed)), pages=[0])
    writer.append(pypdf.PdfReader(io.BytesIO(scanned_pdf([PAGES[2]]))))
    writer.append(pypdf.PdfReader(io.BytesIO(typed)), pages=[1])
    writer.write(tmp_path / "mixed.pdf")
    pages = list(read_documents(tmp_path / "mixed.pdf"))
    assert [(d.metadata["page"], d.metadata.get("ocr")) for d in pages] == [
        ("1", None), ("2", True), ("3", None)]
    assert [pages[0].text, pages[2].text] == ["The depot opens at six.",
                                              "Forklifts charge overnight."]
    assert "Replace the seal every 3000 hours." in pages[1].text


@needs_engine
def test_a_page_drawn_without_an_image_is_not_sent_to_ocr_and_the_line_says_what_to_do() -> None:
    pages_read: list[tuple[int, int]] = []
    with pytest.raises(crag.IngestError, match=r"or its pages are drawn, not scanned\); run `ocrmypdf"):
        list(read_documents(DATA / "bad" / "scanned.pdf", ocr_progress=lambda *call: pages_read.append(call)))
    assert pages_read == []


@needs_engine
def test_an_image_file_is_a_document_of_the_text_in_it(tmp_path: Path) -> None:
    scan(["Visitors sign in at the north gate."]).save(tmp_path / "notice.png")
    [document] = read_documents(tmp_path / "notice.png")
    assert document.text == "Visitors sign in at the north gate."
    assert document.metadata == {"title": "notice", "file_name": "notice.png", "ocr": True}


@needs_engine
def test_a_file_with_more_scanned_pages_than_max_ocr_pages_is_left_out_naming_the_setting(
    tmp_path: Path,
) -> None:
    (tmp_path / "book.pdf").write_bytes(scanned_pdf(PAGES))
    (tmp_path / "notes.txt").write_text("The depot opens at six.\n", encoding="utf-8")
    report = crag.ingest([tmp_path], tmp_path / "index", limits=ReadLimits(max_ocr_pages=2))
    assert report.files_read == 1
    assert report.skipped == [f"{tmp_path / 'book.pdf'} has 3 scanned pages, over "
                              "ingest.max_ocr_pages (2); raise it to read them by OCR, or split "
                              "the file. Left out."]


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - a generator fixture
    """The `ocr` extra as if it were not installed: its modules cannot be imported."""
    monkeypatch.setitem(sys.modules, "tesserocr", None)
    monkeypatch.setitem(sys.modules, "tessdata", None)
    ocr.engine.cache_clear()
    yield
    ocr.engine.cache_clear()


@pytest.mark.usefixtures("no_engine")
def test_without_the_extra_a_scanned_pdf_is_one_line_naming_the_install_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "scan.pdf").write_bytes(scanned_pdf(PAGES[:1]))
    (folder / "notes.txt").write_text("The depot opens at six.\n", encoding="utf-8")
    assert main(["ingest", str(folder), "--index", str(tmp_path / "index"), "--quiet"]) == PARTIAL
    assert capsys.readouterr().err == (
        f"crag: skipped: {folder / 'scan.pdf'} has no text layer (a scanned or image-only PDF); "
        "install the ocr extra to read it by OCR (pip install 'crag-workflows[ocr]').\n")


class SlowPages:
    """An OCR engine whose every page takes `seconds` on its own clock (no time passes)."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.now, self.pages = seconds, 0.0, 0

    def clock(self) -> float:
        return self.now

    def read(self, image: Image.Image) -> str:
        self.now += self.seconds
        self.pages += 1
        return "Replace the seal every 3000 hours."


@pytest.fixture
def slow_pages(monkeypatch: pytest.MonkeyPatch) -> SlowPages:
    """The engine, 70 s a page, as if the extra were installed (Tesseract is not run)."""
    engine = SlowPages(70.0)
    monkeypatch.setattr(ocr, "installed", lambda: True)
    monkeypatch.setattr(ocr, "engine", lambda: engine)
    return engine


def test_ocr_begins_no_page_past_the_files_time_and_leaves_the_file_out_with_a_line(
    tmp_path: Path, slow_pages: SlowPages
) -> None:
    """The bound is the whole file's: a clock that restarted at each page let 500 noisy pages
    read for hours. At 70 s a page, 120 s allow two pages of three."""
    path = tmp_path / "book.pdf"
    token = ocr.ocr_limits.set(ocr.OcrLimits(deadline=120.0, seconds=120.0, clock=slow_pages.clock))
    try:
        with pytest.raises(crag.IngestError, match=r"book.pdf: OCR read 2 of its 3 scanned pages in the 120 s "
                           r"one file may take \(ingest.max_seconds\) \(at 70 s a page, the whole file needs "
                           r"about 210 s\)"):
            ocr.scanned_pages(path, scanned_pdf(PAGES), ["", "", ""])
    finally:
        ocr.ocr_limits.reset(token)
    assert slow_pages.pages == 2


@pytest.mark.parametrize("name", ["book.pdf", "book.tif"])
def test_max_seconds_bounds_a_files_ocr_as_it_is_read(tmp_path: Path, name: str, slow_pages: SlowPages) -> None:
    if name.endswith(".pdf"):
        (tmp_path / name).write_bytes(scanned_pdf(PAGES))
    else:
        first, *rest = [scan(lines) for lines in PAGES]
        first.save(tmp_path / name, save_all=True, append_images=rest)
    with pytest.raises(crag.IngestError, match=rf"{name}: OCR read 0 of its 3 scanned pages in the 0 s"):
        list(read_documents(tmp_path / name, limits=ReadLimits(max_seconds=0)))
    assert slow_pages.pages == 0
