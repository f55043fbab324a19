"""Write the small documents tests/ingestion/formats/test_documents.py reads:
python tests/data/documents/make_fixtures.py

The PDFs are written by hand (a few objects and Helvetica, which every reader knows), so no
drawing library is needed; pypdf encrypts one, python-docx and python-pptx (the test extra)
write the Office files, zipfile the EPUB. The output is committed: CI only reads it.
"""

from __future__ import annotations

import datetime
import io
import json
import zipfile
from pathlib import Path

HERE = Path(__file__).parent
SAMPLE = HERE.parents[2] / "src" / "crag" / "sample_data" / "datasheet.pdf"  # `crag demo --export`
FACT = "The Helio H10 inverter shuts down above 55 degrees Celsius."
HEADER, FOOTER = "Helio H10 Owner's Handbook", "Page {n} of 3"
PAGES = [
    ["Welcome", "This handbook covers the Helio H10 home battery and its inverter."],
    ["Heat and safety", FACT, "Keep the unit shaded; the warranty stays valid when the installa-",
     "tion was done by a certified electrician."],
    ["Cleaning", "Wipe the front panel with a dry cloth once a month."],
]


def pdf(pages: list[list[str]], *, first_label: int | None = None, title: str = "") -> bytes:
    """A PDF whose pages show `pages`' lines in Helvetica; labels from `first_label` if given."""
    objects: list[bytes] = []
    kids = []
    for lines in pages:
        ops = ["BT /F1 11 Tf 14 TL 72 740 Td"] + [f"({_escape(line)}) Tj T*" for line in lines] + ["ET"]
        if not any(lines):  # no text: a drawn grey box, as a scanned page is only a picture
            ops = ["0.5 g 72 300 450 400 re f"]
        stream = "\n".join(ops).encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        objects.append(b"")  # the page, filled in below once the content's number is known
        kids.append(len(objects))
    for number in kids:
        objects[number - 1] = (b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] "
                               b"/Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>"
                               % (len(objects) + 2, len(objects) + 3, number - 1))
    objects.append(b"<< /Type /Catalog /Pages %d 0 R%s >>" % (
        len(objects) + 2,
        b"" if first_label is None else b" /PageLabels << /Nums [0 << /S /D /St %d >>] >>" % first_label))
    objects.append(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids), len(kids)))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    info = b"<< /Title (%s) >>" % _escape(title).encode("latin-1")
    objects.append(info)
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % o for o in offsets))
    catalog, info_number = len(objects) - 3, len(objects)
    out.write(b"trailer\n<< /Size %d /Root %d 0 R /Info %d 0 R >>\nstartxref\n%d\n%%%%EOF\n"
              % (len(objects) + 1, catalog, info_number, xref))
    return out.getvalue()


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def handbook() -> bytes:
    pages = [[HEADER, *lines, FOOTER.format(n=n)] for n, lines in enumerate(PAGES, start=1)]
    return pdf(pages, first_label=11, title="Helio H10 Owner's Handbook")


def encrypted(plain: bytes) -> bytes:
    import pypdf

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(plain)))
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx(path: Path) -> None:
    import docx as python_docx

    document = python_docx.Document()
    document.core_properties.created = document.core_properties.modified = datetime.datetime(2026, 1, 1)
    document.add_heading("Installer guide", level=0)
    document.add_paragraph("This guide is for certified electricians.")
    document.add_heading("Installation", level=1)
    document.add_paragraph("Mount the Helio H10 on a wall that carries 120 kilograms.")
    document.add_heading("Wiring", level=2)
    document.add_paragraph("Use copper cable of at least 16 square millimetres for the mains feed.")
    table = document.add_table(rows=2, cols=2)
    for row, cells in zip(table.rows, [("Cable", "Section"), ("Mains", "16 mm2")]):
        for cell, text in zip(row.cells, cells):
            cell.text = text
    document.add_heading("Maintenance", level=1)
    document.add_paragraph("Check the breaker once a year.")
    document.save(path)


def pptx(path: Path) -> None:
    import pptx as python_pptx

    deck = python_pptx.Presentation()
    deck.core_properties.created = deck.core_properties.modified = datetime.datetime(2026, 1, 1)
    for title, body in [("Helio H10 launch", "A home battery for every roof."),
                        ("Pricing", "The Helio H10 costs 4,900 euros before subsidies."),
                        ("Roadmap", "The Helio H20 ships in spring with twice the capacity.")]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text_frame.text = body
    deck.save(path)


def notebook() -> str:
    cells = [
        ("markdown", "# Battery analysis\nWe look at a year of charge cycles."),
        ("code", "import statistics\ncycles = [1, 2, 3]"),
        ("markdown", ""),
        ("markdown", "The median battery temperature over the year was 31 degrees Celsius."),
    ]
    return json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True),
                   **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                  for kind, text in cells],
    }, indent=1) + "\n"


def table() -> str:
    lines = ["site,city,installed_kwh,inverter"]
    lines += [f"S{n:03d},{city},{n * 1.5:.1f},H10" for n, city in
              enumerate(["Lyon", "Turin", "Graz", "Ghent", "Porto", "Cork"] * 7, start=1)]
    lines[17] = "S017,Zwolle,99.5,H10-XL"
    return "\n".join(lines) + "\n"


CHAPTERS = [  # (file, heading, text): the first two are titled by the book's TOC, the third by its <h1>
    ("intro.xhtml", "Welcome", "This book explains how the Helio H10 ages."),
    ("cycles.xhtml", "Cycles", "The Helio H10 keeps 80 percent of its capacity after 6,000 cycles."),
    ("recycling.xhtml", "Recycling", "Return a worn Helio H10 to any Lumen Energy dealer."),
]


def epub_container(package: str) -> str:
    """META-INF/container.xml naming the book's package file."""
    return ('<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:'
            f'xmlns:container"><rootfiles><rootfile full-path="{package}" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>')


def epub_package(creators: tuple[str, ...] | list[str] = ()) -> str:
    """The book's package file: its title, its authors (dc:creator) and its chapters in order."""
    return (
        '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Living with the '
        "Helio H10</dc:title>" + "".join(f"<dc:creator>{c}</dc:creator>" for c in creators) + "</metadata><manifest>"
        '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
        '<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>'
        + "".join(f'<item id="c{n}" href="text/{name}" media-type="application/xhtml+xml"/>'
                  for n, (name, _, _) in enumerate(CHAPTERS, start=1))
        + '</manifest><spine toc="ncx"><itemref idref="nav"/>'
        + "".join(f'<itemref idref="c{n}"/>' for n in range(1, len(CHAPTERS) + 1))
        + "</spine></package>")


def epub(files: dict[str, str] | None = None) -> bytes:
    """An EPUB 3 book: the nav document titles chapter 1, the EPUB 2 NCX chapter 2, and
    chapter 3 only has its heading; `files` replaces or adds members."""
    page = ('<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml">'
            "<head><title>{title}</title></head><body>{body}</body></html>")
    members = {
        "META-INF/container.xml": epub_container("OEBPS/content.opf"),
        "OEBPS/content.opf": epub_package(),
        "OEBPS/nav.xhtml": page.format(title="Contents", body=(
            '<nav xmlns:epub="http://www.idpf.org/2007/ops" epub:type="toc"><ol>'
            '<li><a href="text/intro.xhtml">Getting started</a></li></ol></nav>')),
        "OEBPS/toc.ncx": (
            '<?xml version="1.0"?><ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">'
            '<navMap><navPoint id="p2"><navLabel><text>Charge cycles</text></navLabel>'
            '<content src="text/cycles.xhtml#start"/></navPoint></navMap></ncx>'),
        **{f"OEBPS/text/{name}": page.format(title=heading, body=f"<h1>{heading}</h1><p>{text}</p>")
           for name, heading, text in CHAPTERS},
        **(files or {}),
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(zipfile.ZipInfo("mimetype", (2026, 1, 1, 0, 0, 0)), "application/epub+zip")
        for name, text in members.items():
            info = zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, text)
    return out.getvalue()


def datasheet() -> bytes:
    """The sample's PDF, for the README's walk-through: a fact the Markdown handbook lacks."""
    pages = [["Helio H10 datasheet", "Lumen Energy, 2024 edition.",
              "Usable energy: 10 kilowatt-hours. Continuous power: 5 kilowatts."],
             ["Operating conditions", "The Helio H10 works between -10 and 45 degrees Celsius.",
              "Above 40 degrees Celsius the Helio H10 limits its output to 2.5 kilowatts."]]
    return pdf(pages, title="Helio H10 datasheet")


def main() -> None:
    plain = handbook()
    files: dict[str, bytes] = {
        "good/handbook.pdf": plain,
        "good/notebook.ipynb": notebook().encode(),
        "good/sites.csv": table().encode(),
        "bad/encrypted.pdf": encrypted(plain),
        "bad/scanned.pdf": pdf([[""], [""]]),
        "bad/truncated.pdf": plain[: len(plain) // 3],
        "bad/empty.pdf": b"",
        "bad/not-a-zip.docx": b"This is a plain text file renamed to .docx.\n",
        "bad/broken.ipynb": notebook().encode()[:-40],
        "good/book.epub": epub(),
        "bad/not-a-zip.epub": b"This is a plain text file renamed to .epub.\n",
        "bad/no-package.epub": epub({"META-INF/container.xml": epub_container("OEBPS/missing.opf")}),
        "bad/mixed.csv": "city,note\nZ\u00fcrich,fine\n".encode() + "M\u00e1laga,caf\u00e9\n".encode("latin-1"),
    }
    for name, data in files.items():
        (HERE / name).parent.mkdir(exist_ok=True)
        (HERE / name).write_bytes(data)
    SAMPLE.write_bytes(datasheet())
    docx(HERE / "good" / "installer.docx")
    pptx(HERE / "good" / "launch.pptx")
    print(f"wrote {len(files) + 2} files under {HERE}, and {SAMPLE}")


if __name__ == "__main__":
    main()
