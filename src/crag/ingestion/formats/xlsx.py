"""Excel (.xlsx, .xlsm): each sheet's tables as a CSV's rows are kept, its charts and comments.

A sheet is cut into tables at its empty rows; a table's first row is its header, and its
rows go in groups under `GROUP_CHARS`, each group led by the header line and cited by the
sheet's name (`section`) and the rows' numbers as Excel shows them (`rows`, "2-14"). Lines
of one cell above a table (its title) and tables of one column are text. A cell reads as
Excel shows it where that is easy: shared and inline strings, numbers (a formula's cached
value), TRUE/FALSE, dates and times (ISO 8601, by the cell's number format) and percentages.

Read with the standard library (zipfile and ElementTree), as .docx files are: a workbook's
cells are a few plain XML parts. Sheets and shared strings are parsed as they unpack
(`crag.ingestion.formats.archive`), a row at a time.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from itertools import chain
from pathlib import Path
from xml.etree import ElementTree

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.formats import doc_id, require_bytes, short_reason
from crag.ingestion.formats.archive import Unpacker, open_zip, relationships
from crag.ingestion.formats.charts import chart_text
from crag.ingestion.formats.table import GROUP_CHARS

_S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_CELL = re.compile(r"^([A-Z]{1,3})(\d+)$")
# Built-in number formats that show a date or a time (ECMA-376 18.8.30, and the East Asian ones).
_DATE_FORMATS = frozenset({*range(14, 23), *range(27, 37), *range(45, 48), *range(50, 59)})
_PERCENT_FORMATS = frozenset({9, 10})
_LITERAL = re.compile(r'"[^"]*"|\\.|\[[^\]]*\]')  # quoted text, escaped characters, [colours]
_MAX_COLUMNS = 16_384  # Excel's last column, XFD

Row = tuple[int, dict[int, str]]
"""A row's number and its cells by column (0 for A), the empty ones left out."""


def read_xlsx(path: Path, data: bytes) -> Iterator[Document]:
    """Groups of a sheet's table rows, its text lines, its charts and its comments, one
    Document each: `section` is the sheet's name, `rows` the rows' numbers ("2-14")."""
    require_bytes(path, data, "workbook")
    try:
        archive = open_zip(path, data)
    except zipfile.BadZipFile:
        raise IngestError(f"{path} is not an Excel workbook (not a zip archive: an old .xls, one "
                          "saved with a password to open, or damaged); save it again as .xlsx.") from None
    number = 0
    try:
        with archive:
            for sheet, texts in _sheets(path, Unpacker(path, archive)):
                for text, rows in texts:
                    metadata = {"title": path.stem, "file_name": path.name, "section": sheet}
                    if rows:
                        metadata["rows"] = rows
                    yield Document(text=text, id_=doc_id(path, number), metadata=metadata)
                    number += 1
    except IngestError:
        raise
    except (ElementTree.ParseError, zipfile.BadZipFile, zipfile.LargeZipFile, KeyError, OSError, ValueError,
            IndexError, EOFError, RuntimeError, NotImplementedError, OverflowError) as exc:
        raise IngestError(f"{path} is a damaged Excel workbook ({short_reason(exc)}); save it again.") from None


def _sheets(path: Path, unpacker: Unpacker) -> Iterator[tuple[str, Iterator[tuple[str, str]]]]:
    """(sheet name, its texts: (text, rows cited)) for each sheet, in the workbook's order."""
    names = set(unpacker.archive.namelist())
    book = next((member for kind, member in relationships(unpacker, "").values()
                 if kind == "officeDocument"), "xl/workbook.xml")
    if book not in names:
        raise IngestError(f"{path} is a zip archive but not an Excel workbook (no {book}); leave it out.")
    workbook = ElementTree.fromstring(unpacker.read(book))
    parts = relationships(unpacker, book)
    cells = _Cells(
        strings=next((_strings(unpacker.stream(m)) for kind, m in parts.values() if kind == "sharedStrings"), []),
        styles=next((_styles(unpacker.read(m)) for kind, m in parts.values() if kind == "styles"), {}),
        date1904=any(pr.get("date1904") in ("1", "true") for pr in workbook.iter(f"{_S}workbookPr")))
    for sheet in workbook.iter(f"{_S}sheet"):
        kind, member = parts.get(sheet.get(f"{_R}id", ""), ("", ""))
        texts: list[Iterable[tuple[str, str]]] = []
        if kind == "worksheet":
            texts.append(_tables(cells.rows(unpacker.stream(member))))
        links = relationships(unpacker, member) if member else {}
        texts.append(_charts(unpacker, links))
        texts.append(_comments(unpacker, links))
        yield sheet.get("name", ""), chain.from_iterable(texts)


class _Cells:
    """What a cell's value means: the shared strings it points into, the number format its
    style gives it, the workbook's first day."""

    def __init__(self, strings: list[str], styles: dict[int, str], date1904: bool) -> None:
        self.strings = strings
        self.styles = styles  # a style's index -> "date", "time", "datetime" or "percent"
        self.epoch = datetime(1904, 1, 1) if date1904 else datetime(1899, 12, 30)

    def rows(self, pieces: Iterable[bytes]) -> Iterator[Row]:
        last = 0
        for row in _elements(pieces, f"{_S}row"):
            last = int(row.get("r") or last + 1)
            cells: dict[int, str] = {}
            column = -1
            for cell in row.iter(f"{_S}c"):
                found = _CELL.match(cell.get("r", ""))
                column = _column(found.group(1)) if found else column + 1
                text = self.value(cell)
                if text and column < _MAX_COLUMNS:
                    cells[column] = text
            if cells:
                yield last, cells

    def value(self, cell: ElementTree.Element) -> str:
        kind = cell.get("t", "n")
        if kind == "inlineStr":
            return _string(cell.find(f"{_S}is"))
        raw = cell.findtext(f"{_S}v")
        if raw is None or raw == "":
            return ""
        if kind == "s":
            index = int(raw)
            return self.strings[index] if 0 <= index < len(self.strings) else ""
        if kind == "b":
            return "TRUE" if raw.strip() == "1" else "FALSE"
        if kind != "n":  # str (a formula's text), e (an error: #DIV/0!), d (an ISO date)
            return " ".join(raw.split())
        return self.number(float(raw), self.styles.get(int(cell.get("s") or 0), ""))

    def number(self, value: float, shown: str) -> str:
        if shown == "percent":
            return f"{round(value * 100, 10):.15g}%"
        if shown and 0 <= value < 2_958_466:  # a date or a time, up to 9999-12-31
            moment = self.epoch + timedelta(days=value)
            moment = moment.replace(microsecond=0) + timedelta(seconds=round(moment.microsecond / 1e6))
            if shown == "time":
                return moment.strftime("%H:%M:%S" if moment.second else "%H:%M")
            if shown == "date" or moment.time() == datetime.min.time():
                return moment.date().isoformat()
            return moment.isoformat(sep=" ", timespec="seconds" if moment.second else "minutes")
        return f"{value:.15g}"


def _tables(rows: Iterable[Row]) -> Iterator[tuple[str, str]]:
    """A sheet's blocks of rows (cut at empty rows) as text: lines of one cell above a table
    as a paragraph, then the table's rows in groups, each led by its header line."""
    block: list[Row] = []
    for row in chain(rows, [(-1, {})]):
        if block and row[0] != block[-1][0] + 1:
            yield from _block(block)
            block = []
        block.append(row)


def _block(block: list[Row]) -> Iterator[tuple[str, str]]:
    start = next((n for n, (_, cells) in enumerate(block) if len(cells) > 1), len(block))
    if start:  # a title, a note: lines of text
        lines = block[:start] if start < len(block) - 1 else block  # a table needs two rows
        yield "\n\n".join(next(iter(cells.values())) if len(cells) == 1 else " | ".join(cells.values())
                          for _, cells in lines), _span(lines)
        block = block[len(lines):]
    if not block:
        return
    first = min(min(cells) for _, cells in block)
    width = max(max(cells) for _, cells in block) + 1 - first
    lines = [(number, " | ".join(cells.get(first + n, "") for n in range(width))) for number, cells in block]
    header, group = lines[0][1], []
    for line in lines[1:]:
        group.append(line)
        if sum(len(text) + 1 for _, text in group) >= GROUP_CHARS:
            yield "\n\n".join([header, *(text for _, text in group)]), _span(group)
            group = []
    if group:
        yield "\n\n".join([header, *(text for _, text in group)]), _span(group)


def _span(rows: list[tuple[int, object]]) -> str:
    return f"{rows[0][0]}-{rows[-1][0]}"


def _charts(unpacker: Unpacker, sheet: dict[str, tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """The text of each chart drawn on a sheet (or a chart sheet), one apiece."""
    for kind, drawing in sheet.values():
        if kind != "drawing":
            continue
        for kind_, chart in relationships(unpacker, drawing).values():
            text = chart_text(unpacker.read(chart)) if kind_ == "chart" else ""
            if text:
                yield text, ""


def _comments(unpacker: Unpacker, sheet: dict[str, tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """A sheet's comments (notes), each "B3 (John Reviewer): text", together."""
    for kind, member in sheet.values():
        if kind != "comments":
            continue
        root = ElementTree.fromstring(unpacker.read(member))
        authors = [" ".join((a.text or "").split()) for a in root.iter(f"{_S}author")]
        lines = []
        for comment in root.iter(f"{_S}comment"):
            text = " ".join(_string(comment.find(f"{_S}text")).split())
            index = int(comment.get("authorId") or -1)
            who = f" ({authors[index]})" if 0 <= index < len(authors) and authors[index] else ""
            if text:
                lines.append(f"{comment.get('ref', '')}{who}: {text}")
        if lines:
            yield "\n\n".join(["Comments", *lines]), ""


def _strings(pieces: Iterable[bytes]) -> list[str]:
    return [_string(item) for item in _elements(pieces, f"{_S}si")]


def _string(item: ElementTree.Element | None) -> str:
    """A string item's text: its runs, without the phonetic guide (`rPh`) over East Asian text."""
    if item is None:
        return ""
    runs = [item, *item.findall(f"{_S}r")]
    return "".join(run.findtext(f"{_S}t") or "" for run in runs)


def _styles(xml: bytes) -> dict[int, str]:
    """Each cell style's index -> how its number shows: "date", "time", "datetime", "percent"."""
    root = ElementTree.fromstring(xml)
    codes = {int(f.get("numFmtId", -1)): f.get("formatCode", "") for f in root.iter(f"{_S}numFmt")}
    shown = {}
    xfs = root.find(f"{_S}cellXfs")
    for index, xf in enumerate(xfs if xfs is not None else ()):
        number = int(xf.get("numFmtId") or 0)
        kind = _shown(number, codes.get(number))
        if kind:
            shown[index] = kind
    return shown


def _shown(number: int, code: str | None) -> str:
    if code is None:
        if number in _PERCENT_FORMATS:
            return "percent"
        return ("time" if number in (18, 19, 20, 21, 45, 46, 47) else "date") if number in _DATE_FORMATS else ""
    bare = _LITERAL.sub("", code.split(";")[0]).lower()
    if "%" in bare:
        return "percent"
    day, clock = any(c in bare for c in "dy") or "mmm" in bare, any(c in bare for c in "hs")
    if day or clock or bare.strip() in ("m", "mm"):
        return "datetime" if day and clock else "time" if clock else "date"
    return ""


def _column(letters: str) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + ord(letter) - 64
    return number - 1


def _elements(pieces: Iterable[bytes], tag: str) -> Iterator[ElementTree.Element]:
    """Each element with `tag`, whole, as the XML streams in; let go once the caller has read it,
    so memory holds one row, not the sheet."""
    parser = ElementTree.XMLPullParser(events=("start", "end"))
    open_: list[ElementTree.Element] = []
    for piece in chain(pieces, [b""]):
        if piece:
            parser.feed(piece)
        else:
            parser.close()
        read: dict[int, tuple[ElementTree.Element, int]] = {}
        for event, element in parser.read_events():
            if event == "start":
                open_.append(element)
                continue
            open_.pop()
            if element.tag == tag:
                yield element
                if open_:
                    parent = open_[-1]
                    read[id(parent)] = (parent, read.get(id(parent), (parent, 0))[1] + 1)
        for parent, count in read.values():
            del parent[:count]  # the first ones: those before were let go already
