"""Excel workbooks: each sheet's tables kept as tables (every group of rows led by its header),
cells read as Excel shows them, cited by sheet and rows; charts and comments read too."""

from __future__ import annotations

import io
import zipfile
from itertools import pairwise
from pathlib import Path

import pytest

from crag.errors import IngestError
from crag.ingestion.files import ReadLimits
from crag.ingestion.readers import read_documents
from crag.trace import Location

MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
RELS = "http://schemas.openxmlformats.org/package/2006/relationships"
KIND = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
CHART = "http://schemas.openxmlformats.org/drawingml/2006/chart"


def rels(*links: tuple[str, str, str]) -> str:
    body = "".join(f'<Relationship Id="{i}" Type="{KIND}/{kind}" Target="{target}"/>' for i, kind, target in links)
    return f'<Relationships xmlns="{RELS}">{body}</Relationships>'


def sheet(rows: dict[int, str]) -> str:
    body = "".join(f'<row r="{n}">{cells}</row>' for n, cells in rows.items())
    return f'<worksheet xmlns="{MAIN}"><sheetData>{body}</sheetData></worksheet>'


def workbook(members: dict[str, str | bytes] | None = None) -> bytes:
    """A two-sheet workbook as Excel writes one: shared strings, styles (a date format, a
    percentage), a formula's cached value, a title above a table, two tables a blank row apart,
    a chart and a comment."""
    strings = ["Site", "City", "kWh", "Installed", "Share", "Zwolle", "Deventer", "Sites in service"]
    parts: dict[str, str | bytes] = {
        "_rels/.rels": rels(("r1", "officeDocument", "xl/workbook.xml")),
        "xl/workbook.xml": f'<workbook xmlns="{MAIN}" xmlns:r="{KIND}"><sheets>'
                           '<sheet name="Sites" sheetId="1" r:id="rId1"/><sheet name="Notes" sheetId="2" r:id="rId2"/>'
                           '</sheets></workbook>',
        "xl/_rels/workbook.xml.rels": rels(("rId1", "worksheet", "worksheets/sheet1.xml"),
                                           ("rId2", "worksheet", "worksheets/sheet2.xml"),
                                           ("rId3", "sharedStrings", "sharedStrings.xml"),
                                           ("rId4", "styles", "styles.xml")),
        "xl/sharedStrings.xml": f'<sst xmlns="{MAIN}">' + "".join(
            f"<si><t>{s}</t></si>" if n != 7 else "<si><r><t>Sites in </t></r><r><t>service</t></r></si>"
            for n, s in enumerate(strings)) + "</sst>",
        "xl/styles.xml": f'<styleSheet xmlns="{MAIN}"><numFmts><numFmt numFmtId="164" formatCode="d/m/yyyy"/>'
                         '</numFmts><cellXfs><xf numFmtId="0"/><xf numFmtId="164"/><xf numFmtId="9"/>'
                         '</cellXfs></styleSheet>',
        "xl/worksheets/sheet1.xml": sheet({
            1: '<c r="A1" t="s"><v>7</v></c>',  # a title: one cell over the table
            2: '<c r="A2" t="s"><v>0</v></c><c r="B2" t="s"><v>1</v></c><c r="C2" t="s"><v>2</v></c>'
               '<c r="D2" t="s"><v>3</v></c><c r="E2" t="s"><v>4</v></c>',
            3: '<c r="A3"><v>1</v></c><c r="B3" t="s"><v>5</v></c><c r="C3"><f>SUM(X1:X9)</f><v>120.5</v></c>'
               '<c r="D3" s="1"><v>45306</v></c><c r="E3" s="2"><v>0.25</v></c>',
            4: '<c r="A4"><v>2</v></c><c r="B4" t="s"><v>6</v></c><c r="C4"><v>80</v></c>'
               '<c r="D4" s="1"><v>45307</v></c><c r="E4" t="b"><v>1</v></c>',
            6: '<c r="B6" t="inlineStr"><is><t>Inverter</t></is></c><c r="C6" t="inlineStr"><is><t>Phase</t></is></c>',
            7: '<c r="B7" t="inlineStr"><is><t>H10</t></is></c><c r="C7"><v>3</v></c>',
        }),
        "xl/worksheets/_rels/sheet1.xml.rels": rels(("d1", "drawing", "../drawings/drawing1.xml"),
                                                    ("c1", "comments", "../comments1.xml")),
        "xl/drawings/drawing1.xml": "<wsDr/>",
        "xl/drawings/_rels/drawing1.xml.rels": rels(("ch1", "chart", "../charts/chart1.xml")),
        "xl/charts/chart1.xml": f'<c:chartSpace xmlns:c="{CHART}" xmlns:a="http://schemas.openxmlformats.org/'
                                'drawingml/2006/main"><c:chart><c:title><c:tx><c:rich><a:p><a:r><a:t>Output per site'
                                '</a:t></a:r></a:p></c:rich></c:tx></c:title><c:plotArea><c:barChart><c:ser>'
                                '<c:tx><c:v>kWh</c:v></c:tx><c:cat><c:strRef><c:strCache><c:ptCount val="2"/>'
                                '<c:pt idx="0"><c:v>Zwolle</c:v></c:pt><c:pt idx="1"><c:v>Deventer</c:v></c:pt>'
                                '</c:strCache></c:strRef></c:cat><c:val><c:numRef><c:numCache><c:ptCount val="2"/>'
                                '<c:pt idx="0"><c:v>120.5</c:v></c:pt><c:pt idx="1"><c:v>80</c:v></c:pt></c:numCache>'
                                '</c:numRef></c:val></c:ser></c:barChart></c:plotArea></c:chart></c:chartSpace>',
        "xl/comments1.xml": f'<comments xmlns="{MAIN}"><authors><author>Ann Reviewer</author></authors><commentList>'
                            '<comment ref="C3" authorId="0"><text><r><t>Estimated, not metered</t></r></text>'
                            '</comment></commentList></comments>',
        "xl/worksheets/sheet2.xml": sheet({1: '<c r="A1" t="inlineStr"><is><t>Checked every May.</t></is></c>'}),
    }
    parts.update(members or {})
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in parts.items():
            archive.writestr(name, text)
    return out.getvalue()


def read(tmp_path: Path, data: bytes, name: str = "sites.xlsx", **limits: float) -> list:
    path = tmp_path / name
    path.write_bytes(data)
    return list(read_documents(path, limits=ReadLimits(**limits) if limits else None))


def test_a_sheet_is_read_as_tables_each_group_led_by_its_header_and_cited_by_sheet_and_rows(tmp_path: Path) -> None:
    documents = read(tmp_path, workbook())
    sites = [d for d in documents if d.metadata["section"] == "Sites"]
    assert [d.text for d in sites[:3]] == [
        "Sites in service",
        ("Site | City | kWh | Installed | Share\n\n1 | Zwolle | 120.5 | 2024-01-15 | 25%\n\n"
         "2 | Deventer | 80 | 2024-01-16 | TRUE"),
        "Inverter | Phase\n\nH10 | 3",  # a second table, a blank row down, its own header
    ]
    assert [d.metadata.get("rows") for d in sites[:3]] == ["1-1", "3-4", "7-7"]
    cited = Location(**Location.fields({**sites[1].metadata, "file": str(tmp_path / "sites.xlsx")}))
    assert cited.citation() == "sites.xlsx, rows 3-4 (Sites)" and cited.file_id
    notes = [d for d in documents if d.metadata["section"] == "Notes"]
    assert [d.text for d in notes] == ["Checked every May."]


def test_a_sheets_chart_and_comments_are_read_as_text(tmp_path: Path) -> None:
    texts = [d.text for d in read(tmp_path, workbook()) if d.metadata["section"] == "Sites"]
    assert "Output per site\n\nBar chart\n\n| kWh\nZwolle | 120.5\nDeventer | 80" in texts
    assert "Comments\n\nC3 (Ann Reviewer): Estimated, not metered" in texts


def test_a_long_table_repeats_its_header_in_every_group_and_keeps_every_row_once(tmp_path: Path) -> None:
    rows = {1: '<c r="A1" t="inlineStr"><is><t>Name</t></is></c><c r="B1" t="inlineStr"><is><t>Score</t></is></c>'}
    rows |= {n: f'<c r="A{n}" t="inlineStr"><is><t>player {n}</t></is></c><c r="B{n}"><v>{n * 7}</v></c>'
             for n in range(2, 202)}
    groups = [d for d in read(tmp_path, workbook({"xl/worksheets/sheet1.xml": sheet(rows)}))
              if d.metadata.get("rows") and d.metadata["section"] == "Sites"]
    assert len(groups) > 5 and all(d.text.startswith("Name | Score\n\n") for d in groups)
    spans = [tuple(map(int, d.metadata["rows"].split("-"))) for d in groups]
    assert spans[0][0] == 2 and spans[-1][1] == 201
    assert all(b[0] == a[1] + 1 for a, b in pairwise(spans))
    assert sum(d.text.count("\n\nplayer ") for d in groups) == 200


def test_a_workbook_that_is_not_a_zip_is_one_line_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"old\.xlsx is not an Excel workbook \(not a zip archive: an old \.xls"):
        read(tmp_path, b"\xd0\xcf\x11\xe0 an old binary .xls", name="old.xlsx")


def test_a_zip_bomb_of_a_sheet_is_refused_at_the_unpack_limit(tmp_path: Path) -> None:
    huge = sheet({1: '<c r="A1"><v>1</v></c>'}).replace("<sheetData>", "<sheetData>" + " " * 3_000_000)
    with pytest.raises(IngestError, match="max_unpacked_mb"):
        read(tmp_path, workbook({"xl/worksheets/sheet1.xml": huge}), max_unpacked_mb=1)
