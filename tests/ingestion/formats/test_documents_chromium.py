"""A PDF as a browser prints it, a Word file and an encrypted PDF, ingested by one command and
cited by file and page. Skipped only where no Chromium exists; `.ci/run` installs Debian's
`chromium`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.marks import BROWSER

from crag.app.cli import PARTIAL, main
from crag.app.render.browser import print_pdf

pytestmark = [*BROWSER, pytest.mark.usefixtures("no_config_file")]

PAGES = [
    "Solar panels on the depot roof were cleaned in spring. The crew washed every row by hand.",
    ("The Ostrava substation transformer is rated at 40 megavolt-amperes. It was replaced after "
     "the flood, and its cooling oil is tested twice a year."),
    "Snow is brushed off the panels after each storm. Nothing else is done in winter.",
]
DOCX_FACT = "The Brno warehouse forklift batteries are charged overnight at 48 volts."


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """report.pdf (three pages printed by Chromium), notes.docx and locked.pdf (a password)."""
    import docx
    import pypdf

    folder = tmp_path_factory.mktemp("chromium") / "docs"
    folder.mkdir()
    page = folder.parent / "report.html"
    body = "".join(f'<p style="page-break-before: {"always" if i else "auto"}">{text}</p>'
                   for i, text in enumerate(PAGES))
    page.write_text(f"<!doctype html><html><body>{body}</body></html>", encoding="utf-8")
    print_pdf(page, folder / "report.pdf")
    assert len(pypdf.PdfReader(folder / "report.pdf").pages) == 3
    document = docx.Document()
    document.add_paragraph("Warehouse notes, kept by the night shift.")
    document.add_paragraph(DOCX_FACT)
    document.save(folder / "notes.docx")
    locked = pypdf.PdfWriter(clone_from=folder / "report.pdf")
    locked.encrypt("s3cret", algorithm="RC4-128")  # RC4: pypdf opens it without `cryptography`
    locked.write(folder / "locked.pdf")
    return folder


def test_one_ingest_reads_the_pdf_and_the_docx_and_names_the_encrypted_pdf(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    assert main(["ingest", str(folder), "--index", str(index), "--quiet"]) == PARTIAL
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        (f"crag: skipped: {folder / 'locked.pdf'} is encrypted (it needs a password); save a copy "
         "without one (e.g. `qpdf --decrypt`) or leave it out.")
    ]
    assert captured.out.startswith("2 file(s) read, 0 unchanged, 1 skipped, ")

    page_two = ask(capsys, index, "What is the Ostrava substation transformer rated at?")
    assert (page_two["file"], page_two["page"]) == ("report.pdf", "2")
    assert "40 megavolt-amperes" in page_two["text"]
    notes = ask(capsys, index, "At what voltage are the Brno warehouse forklift batteries charged?")
    assert notes["file"] == "notes.docx" and "48 volts" in notes["text"]


def ask(capsys: pytest.CaptureFixture[str], index: Path, question: str) -> dict:
    """The first source `crag ask --json` gives for `question`."""
    assert main(["ask", question, "--index", str(index), "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)["sources"][0]
