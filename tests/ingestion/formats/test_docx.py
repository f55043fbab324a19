"""Word documents as forms and templates write them: text in content controls (around blocks,
runs, rows and cells) and in text boxes is read, once; tables stay tables."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from crag.ingestion.readers import read_documents

NAMESPACES = ('xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" '
              'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
              'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape" '
              'xmlns:v="urn:schemas-microsoft-com:vml" '
              'xmlns:w14="http://schemas.microsoft.com/office/word/2010/wordml"')


def p(text: str) -> str:
    return f"<w:p><w:r><w:t>{text}</w:t></w:r></w:p>"


def sdt(inner: str) -> str:
    return f'<w:sdt><w:sdtPr><w:tag w:val="field"/></w:sdtPr><w:sdtContent>{inner}</w:sdtContent></w:sdt>'


def cell(text: str) -> str:
    return f"<w:tc>{p(text)}</w:tc>"


def docx(body: str, parts: dict[str, str] | None = None) -> bytes:
    xml = f'<?xml version="1.0"?><w:document {NAMESPACES}><w:body>{body}</w:body></w:document>'
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", xml)
        for name, root in (parts or {}).items():  # word/styles.xml: "<w:styles>...</w:styles>"
            archive.writestr(name, root.replace(">", f" {NAMESPACES}>", 1))
    return out.getvalue()


def texts(tmp_path: Path, body: str, parts: dict[str, str] | None = None) -> list[str]:
    path = tmp_path / "form.docx"
    path.write_bytes(docx(body, parts))
    return [d.text for d in read_documents(path)]


def test_text_in_content_controls_is_read_around_blocks_runs_rows_and_cells(tmp_path: Path) -> None:
    table = ("<w:tbl>" + sdt(f"<w:tr>{cell('Model')}{cell('Price')}</w:tr>")  # a row in a control
             + f"<w:tr>{cell('H10')}{sdt(cell('4,990 euro'))}</w:tr></w:tbl>")  # a cell in one
    inline = f'<w:p><w:r><w:t xml:space="preserve">Owner: </w:t></w:r>{sdt("<w:r><w:t>Ann Lee</w:t></w:r>")}</w:p>'
    assert texts(tmp_path, sdt(p("Installed in May.") + inline) + sdt(table)) == [
        "Installed in May.\n\nOwner: Ann Lee",
        "Model | Price\n\nH10 | 4,990 euro",  # kept as a table: the header, then the row
    ]


def test_a_text_box_is_read_once_though_word_draws_it_twice(tmp_path: Path) -> None:
    box = "<w:txbxContent>" + p("Keep the vents clear.") + p("Never cover the unit.") + "</w:txbxContent>"
    drawn = ("<w:p><w:r><w:t>See the box.</w:t></w:r><w:r><mc:AlternateContent>"
             f"<mc:Choice Requires=\"wps\"><w:drawing><wps:txbx>{box}</wps:txbx></w:drawing></mc:Choice>"
             f"<mc:Fallback><w:pict><v:textbox>{box}</v:textbox></w:pict></mc:Fallback>"
             "</mc:AlternateContent></w:r></w:p>")
    (text,) = texts(tmp_path, drawn)
    assert text == "See the box.Keep the vents clear.\n\nNever cover the unit."
    assert text.count("vents") == 1



def numbered(text: str, num_id: int, level: int = 0, style: str = "") -> str:
    styled = f'<w:pStyle w:val="{style}"/>' if style else ""
    listed = f'<w:numPr><w:ilvl w:val="{level}"/><w:numId w:val="{num_id}"/></w:numPr>' if num_id else ""
    return f"<w:p><w:pPr>{styled}{listed}</w:pPr><w:r><w:t>{text}</w:t></w:r></w:p>"


def level(at: int, kind: str, text: str) -> str:
    return f'<w:lvl w:ilvl="{at}"><w:start w:val="1"/><w:numFmt w:val="{kind}"/><w:lvlText w:val="{text}"/></w:lvl>'


NUMBERING = ("<w:numbering>"
             f'<w:abstractNum w:abstractNumId="0">{level(0, "decimal", "%1.")}{level(1, "lowerLetter", "%1.%2)")}'
             "</w:abstractNum>"
             f'<w:abstractNum w:abstractNumId="1">{level(0, "upperRoman", "Part %1")}</w:abstractNum>'
             f'<w:abstractNum w:abstractNumId="2">{level(0, "bullet", "•")}</w:abstractNum>'
             '<w:num w:numId="1"><w:abstractNumId w:val="0"/></w:num>'
             '<w:num w:numId="2"><w:abstractNumId w:val="1"/></w:num>'
             '<w:num w:numId="3"><w:abstractNumId w:val="2"/></w:num>'
             '<w:num w:numId="4"><w:abstractNumId w:val="0"/>'
             '<w:lvlOverride w:ilvl="0"><w:startOverride w:val="1"/></w:lvlOverride></w:num>'
             "</w:numbering>")
STYLES = ('<w:styles><w:style w:type="paragraph" w:styleId="Heading1"><w:name w:val="heading 1"/>'
          '<w:pPr><w:numPr><w:numId w:val="2"/></w:numPr></w:pPr></w:style></w:styles>')


def test_numbered_lists_and_headings_keep_the_numbers_word_shows(tmp_path: Path) -> None:
    """Word counts its list numbers: none is text in the file, and "step 2" is asked about."""
    path = tmp_path / "manual.docx"
    path.write_bytes(docx(
        numbered("Setup", 0, style="Heading1") + numbered("Open the lid", 1) + numbered("Check the seal", 1, 1)
        + numbered("Check the hinge", 1, 1) + numbered("Close the lid", 1) + numbered("A bullet", 3)
        + numbered("Use", 0, style="Heading1") + numbered("Start again", 4) + numbered("Not numbered", 0),
        {"word/numbering.xml": NUMBERING, "word/styles.xml": STYLES}))
    documents = list(read_documents(path))
    assert [(d.metadata["section"], d.text) for d in documents] == [
        ("Part I Setup", "1. Open the lid\n\n1.a) Check the seal\n\n1.b) Check the hinge\n\n2. Close the lid\n\nA bullet"),
        ("Part II Use", "1. Start again\n\nNot numbered")]


def test_a_merged_cell_is_written_in_every_row_and_column_it_covers(tmp_path: Path) -> None:
    def tc(text: str, props: str = "") -> str:
        return f"<w:tc><w:tcPr>{props}</w:tcPr>{p(text)}</w:tc>"

    restart, two_columns = '<w:vMerge w:val="restart"/>', '<w:gridSpan w:val="2"/>'
    table = ("<w:tbl>"
             f"<w:tr>{tc('Year')}{tc('Quarter')}{tc('Revenue')}</w:tr>"
             f"<w:tr>{tc('2025', restart)}{tc('Q1 and Q2', two_columns)}</w:tr>"
             f"<w:tr>{tc('', '<w:vMerge/>')}{tc('Q3')}{tc('$160')}</w:tr>"
             f'<w:tr><w:trPr><w:gridBefore w:val="2"/></w:trPr>{tc("$90")}</w:tr>'
             "</w:tbl>")
    assert texts(tmp_path, p("Revenue by quarter:") + table + p("Figures unaudited.")) == [
        "Revenue by quarter:",  # the paragraph before the table stays before it
        "Year | Quarter | Revenue\n\n2025 | Q1 and Q2 | Q1 and Q2\n\n2025 | Q3 | $160\n\n |  | $90",
        "Figures unaudited."]


def test_a_chart_in_a_paragraph_is_read_there_with_its_numbers_as_shown(tmp_path: Path) -> None:
    chart_space = "http://schemas.openxmlformats.org/drawingml/2006/chart"
    chart = (f'<c:chartSpace xmlns:c="{chart_space}"><c:chart><c:plotArea><c:lineChart><c:ser>'
             '<c:tx><c:v>Torque</c:v></c:tx>'
             '<c:cat><c:strRef><c:strCache><c:pt idx="0"><c:v>1000 rpm</c:v></c:pt></c:strCache></c:strRef></c:cat>'
             '<c:val><c:numRef><c:numCache><c:pt idx="0"><c:v>4.4000000000000004</c:v></c:pt></c:numCache></c:numRef>'
             "</c:val></c:ser></c:lineChart></c:plotArea></c:chart></c:chartSpace>")
    relations = ('<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
                 '<Relationship Id="rId5" Type="chart" Target="charts/chart1.xml"/></Relationships>')
    drawn = (f'<w:p><w:r><w:t>Torque by speed:</w:t></w:r><w:r><w:drawing><c:chart xmlns:c="{chart_space}" '
             'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" r:id="rId5"/>'
             "</w:drawing></w:r></w:p>")
    assert texts(tmp_path, drawn + p("Measured in May."), {
        "word/charts/chart1.xml": chart, "word/_rels/document.xml.rels": relations}) == [
        "Torque by speed:\n\nLine chart\n\n| Torque\n1000 rpm | 4.4\n\nMeasured in May."]
