"""No file stops a folder (issue 40), fuzzed: real files of every type crag reads, mutated with a
seeded generator (bytes flipped, cut short, lone surrogates, byte-order marks, right-to-left and
left-to-right marks, text saved as UTF-16, Latin-1 or cp1252, and the same inside the XML of
Office and EPUB files), all in one folder through the real ingest. Each file is read, or named
in a line that leaves it out; the ingest ends and the index is written.

`CRAG_FUZZ_SEED=7 pytest tests/ingestion/test_fuzz_readers.py` tries other mutants.
"""

from __future__ import annotations

import io
import json
import os
import random
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image, ImageDraw
from support.odd_text import surrogate_pdf
from support.paths import DOCUMENTS

from crag import ChunkIndex
from crag.ingestion import ingest
from crag.ingestion.files import ReadLimits
from crag.ingestion.readers import READERS

pytestmark = pytest.mark.usefixtures("no_config_file")

SEED = int(os.environ.get("CRAG_FUZZ_SEED", "40"))
MUTANTS = 4  # of each source file
SENTENCE = "Die Wärmepumpe läuft leise; 열 펌프는 조용합니다; المضخة هادئة. Café №5 costs €12."
LONE = "\ud800".encode("utf-8", "surrogatepass")  # a lone surrogate as some writers leave it
MARKS = ["\u202e", "\u202b", "\u200f", "\u200e", "\u2066", "\u2069", "\u061c"]  # direction marks


def xlsx(rows: list[list[str]]) -> bytes:
    """A workbook of one sheet, its cells inline strings: the few parts Excel needs."""
    cells = "".join(
        f'<row r="{r}">' + "".join(f'<c r="{chr(65 + c)}{r}" t="inlineStr"><is><t>{text}</t></is></c>'
                                   for c, text in enumerate(row)) + "</row>"
        for r, row in enumerate(rows, start=1))
    main = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    parts = {
        "[Content_Types].xml": '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.'
        'spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType='
        '"application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>',
        "_rels/.rels": f'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        f'<Relationship Id="rId1" Type="{rel}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
        "xl/workbook.xml": f'<workbook {main} xmlns:r="{rel}"><sheets>'
        '<sheet name="Pumps" sheetId="1" r:id="rId1"/></sheets></workbook>',
        "xl/_rels/workbook.xml.rels": f'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/'
        f'relationships"><Relationship Id="rId1" Type="{rel}/worksheet" Target="worksheets/sheet1.xml"/>'
        "</Relationships>",
        "xl/worksheets/sheet1.xml": f"<worksheet {main}><sheetData>{cells}</sheetData></worksheet>",
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in parts.items():
            archive.writestr(name, text)
    return out.getvalue()


def png() -> bytes:
    page = Image.new("L", (600, 80), 255)
    ImageDraw.Draw(page).text((20, 30), "The pump runs quietly.", fill=0)
    out = io.BytesIO()
    page.save(out, "PNG")
    return out.getvalue()


def sources() -> dict[str, bytes]:
    """One real file of each type crag reads, by name: the committed documents, and the rest
    made here."""
    made = {
        "notes.txt": f"Notes\n\n{SENTENCE}\n".encode(),
        "guide.md": f"# Guide\n\n## Pumps\n\n{SENTENCE}\n\n<b>bold</b> and `code`\n".encode(),
        "page.html": f"<html><head><title>Pumps</title></head><body><p>{SENTENCE}</p></body></html>".encode(),
        "corpus.jsonl": "\n".join(json.dumps({"doc_id": f"d{n}", "text": SENTENCE, "title": "Pumps"},
                                             ensure_ascii=n % 2 == 0) for n in range(3)).encode(),
        "sites.tsv": f"site\tnote\nBrno\t{SENTENCE}\nLinz\tquiet\n".encode(),
        "pumps.xlsx": xlsx([["Pump", "Note"], ["P1", SENTENCE], ["P2", "quiet"], ["P3", "loud"]]),
        "korean.pdf": surrogate_pdf(),
        "notice.png": png(),
    }
    committed = {p.name: p.read_bytes() for p in sorted((DOCUMENTS / "good").iterdir())}
    return {**committed, **made}


def flipped(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] ^= rng.randint(1, 255)
    return bytes(out)


def truncated(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data))]


def text_mutation(rng: random.Random) -> tuple[str, Callable[[bytes], bytes]]:
    """A way to spoil text (as bytes, UTF-8 coming in)."""

    def inserted(piece: bytes) -> Callable[[bytes], bytes]:
        def insert(data: bytes) -> bytes:
            at = rng.randrange(len(data) + 1)
            while at < len(data) and data[at] & 0xC0 == 0x80:  # not inside a character
                at += 1
            return data[:at] + piece + data[at:]
        return insert

    def recoded(encoding: str) -> Callable[[bytes], bytes]:
        return lambda data: data.decode("utf-8").encode(encoding, "replace")

    name, mutation = rng.choice([
        ("lone-surrogate", inserted(LONE)),
        ("escaped-surrogate", inserted(b"\\ud800")),
        ("marks", inserted("".join(rng.choices(MARKS, k=6)).encode())),
        ("bom-utf8", lambda data: b"\xef\xbb\xbf" + data),
        ("bom-utf16", lambda data: b"\xff\xfe" + data),
        ("bom-inside", inserted(b"\xef\xbb\xbf")),
        ("utf16", recoded("utf-16")),
        ("utf16-le", recoded("utf-16-le")),
        ("latin1", recoded("latin-1")),
        ("cp1252", recoded("cp1252")),
        ("nul", inserted(b"\x00")),
    ])
    return name, mutation


def in_zip(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One XML (or XHTML) member of a zip spoiled as text is; the archive otherwise whole."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = [(info, archive.read(info)) for info in archive.infolist()]
    except zipfile.BadZipFile:
        return "flipped", flipped(data, rng)
    xml = [n for n, (info, _) in enumerate(members) if info.filename.endswith((".xml", ".xhtml", ".opf"))]
    target = rng.choice(xml)
    name, mutation = text_mutation(rng)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as spoiled:
        for n, (info, content) in enumerate(members):
            spoiled.writestr(info, mutation(content) if n == target else content)
    return f"xml-{name}", out.getvalue()


def mutant(name: str, data: bytes, rng: random.Random) -> tuple[str, bytes]:
    if name.endswith((".pdf", ".png")):
        kind = rng.choice(["flipped", "truncated"])
        return kind, (flipped if kind == "flipped" else truncated)(data, rng)
    if name.endswith((".docx", ".pptx", ".epub", ".xlsx")):
        kind = rng.choice(["flipped", "truncated", "xml", "xml"])
        if kind == "xml":
            return in_zip(data, rng)
        return kind, (flipped if kind == "flipped" else truncated)(data, rng)
    kind = rng.choice(["flipped", "truncated", "text", "text", "text"])
    if kind == "text":
        text_name, mutation = text_mutation(rng)
        return text_name, mutation(data)
    return kind, (flipped if kind == "flipped" else truncated)(data, rng)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of mutants of every source, and each source itself."""
    folder = tmp_path_factory.mktemp("fuzz") / "drive"
    folder.mkdir()
    rng = random.Random(SEED)
    for name, data in sources().items():
        stem, suffix = os.path.splitext(name)
        (folder / name).write_bytes(data)
        for number in range(MUTANTS):
            kind, spoiled = mutant(name, data, rng)
            (folder / f"{stem}-{number}-{kind}{suffix}").write_bytes(spoiled)
    return folder


def test_the_sources_cover_every_type_crag_reads() -> None:
    aliases = {".htm": ".html", ".markdown": ".md", ".jpeg": ".png", ".jpg": ".png", ".tif": ".png",
               ".tiff": ".png", ".xlsm": ".xlsx", ".csv": ".tsv"}
    covered = {os.path.splitext(name)[1] for name in sources()}
    assert {aliases.get(suffix, suffix) for suffix in READERS} <= covered | {".csv"}


def test_every_mutant_is_read_or_named_and_the_index_is_written(fuzzed: Path, tmp_path: Path) -> None:
    report = ingest([fuzzed], tmp_path / "index", limits=ReadLimits(max_seconds=20))
    index = ChunkIndex.load(tmp_path / "index")
    read = {Path(key).name for key in index.manifest}
    lines = report.skipped + report.empty
    unnamed = [p.name for p in sorted(fuzzed.iterdir())
               if p.name not in read and not any(str(p) in line for line in lines)]
    assert not unnamed, (unnamed, lines)
    assert report.files_read == len(read) and report.files_read + len(lines) >= len(list(fuzzed.iterdir()))
    assert len(read) >= len(sources())  # at least as many as the sources, which are whole
    for node in index.nodes:
        node.get_content().encode("utf-8")  # valid Unicode, every chunk
