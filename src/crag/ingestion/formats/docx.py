"""Word (.docx): paragraphs and tables, one Document per section under the Heading styles.

Read with the standard library (zipfile and ElementTree): python-docx brings lxml, 15 MB
that the default install has no room for, and a .docx body is a few plain XML elements. The
body is parsed as it unpacks (`crag.ingestion.formats.archive`), one paragraph at a time.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, groupby
from pathlib import Path
from xml.etree import ElementTree

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.formats import doc_id, require_bytes, short_reason
from crag.ingestion.formats.archive import Unpacker, open_zip
from crag.ingestion.formats.charts import chart_text
from crag.ingestion.formats.grid import Cell, spread
from crag.ingestion.formats.numbering import WordNumbering
from crag.ingestion.formats.table import row_groups

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)
# Content controls (a form's fields, a template's blocks) and custom XML wrap paragraphs, rows
# and cells without being any: what they hold is read as if they were not there.
_WRAPPERS = frozenset({f"{_W}sdt", f"{_W}sdtContent", f"{_W}customXml", f"{_W}ins", f"{_W}moveTo"})
# A text box is drawn twice, once as DrawingML (mc:Choice) and once as VML (mc:Fallback).
_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
_MATH_TEXT = "{http://schemas.openxmlformats.org/officeDocument/2006/math}t"
_CHART = "{http://schemas.openxmlformats.org/drawingml/2006/chart}chart"  # a chart drawn in a paragraph
_RELATION = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
_RELATIONSHIP = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"


def read_docx(path: Path, data: bytes) -> Iterator[Document]:
    """One Document per section's run of paragraphs, and per group of a table's rows, in the
    document's order (a table's caption before it); `section` is the heading path ("Setup / Wiring")."""
    require_bytes(path, data, "Word document")
    title, sections = _sections(path, data)
    number = 0
    for headings, blocks in sections:
        metadata = {"title": title, "file_name": path.name}
        if headings:
            metadata["section"] = " / ".join(headings)
        texts: list[str] = []
        for is_table, group in groupby(blocks, key=lambda block: isinstance(block, list)):
            run = list(group)
            texts += [text for rows in run for text in row_groups(rows)] if is_table else ["\n\n".join(run)]
        for text in texts:
            yield Document(text=text, id_=doc_id(path, number), metadata=dict(metadata))
            number += 1


def _sections(path: Path, data: bytes) -> tuple[str, list[tuple[list[str], list[str | list[str]]]]]:
    """The document's title and its sections: (heading path, blocks) each, a block a paragraph
    or a table's rows."""
    try:
        archive = open_zip(path, data)
    except zipfile.BadZipFile:
        raise IngestError(f"{path} is not a Word document (not a zip archive; an old .doc, "
                          "or damaged); save it again as .docx.") from None
    title = path.stem
    sections: list[tuple[list[str], list[str | list[str]]]] = [([], [])]
    trail: list[tuple[int, str]] = []
    try:
        with archive:
            names = set(archive.namelist())
            if "word/document.xml" not in names:
                raise IngestError(f"{path} is a zip archive but not a Word document "
                                  "(no word/document.xml); leave it out.")
            unpacker = Unpacker(path, archive)
            styles, numbering = (ElementTree.fromstring(unpacker.read(name)) if name in names else None
                                 for name in ("word/styles.xml", "word/numbering.xml"))
            numbers = WordNumbering(numbering, styles)
            charts = _charts(unpacker, names)
            for kind, level, text in _blocks(unpacker.stream("word/document.xml"), _style_names(styles), numbers,
                                             charts):
                if kind == "title" and text:
                    title = text
                elif kind == "heading" and text:
                    trail = [(lv, h) for lv, h in trail if lv < level] + [(level, text)]
                    sections.append(([h for _, h in trail], []))
                elif kind == "table" and text:
                    sections[-1][1].append(text.split("\n"))
                elif text.strip():
                    sections[-1][1].append(text)
    except IngestError:
        raise
    except (ElementTree.ParseError, zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, ValueError,
            EOFError, RuntimeError, NotImplementedError) as exc:
        raise IngestError(f"{path} is a damaged Word document ({short_reason(exc)}); save it again.") from None
    return title, sections


def _charts(unpacker: Unpacker, names: set[str]) -> Callable[[str], str]:
    """`words(relation id)`: the words of the chart a paragraph draws (`crag.ingestion.formats.charts`),
    "" where the id names no chart, or a damaged one (the document's text is read all the same)."""
    targets: dict[str, str] = {}
    if "word/_rels/document.xml.rels" in names:
        for relation in ElementTree.fromstring(unpacker.read("word/_rels/document.xml.rels")).iter(_RELATIONSHIP):
            target = posixpath.normpath(posixpath.join("word", relation.get("Target", "")))
            if target.startswith("word/charts/") and target in names:
                targets[relation.get("Id", "")] = target
    read: dict[str, str] = {}  # each chart read once, however many paragraphs name it

    def words(relation: str) -> str:
        target = targets.get(relation)
        if target is None:
            return ""
        if target not in read:
            try:
                read[target] = chart_text(unpacker.read(target))
            except ElementTree.ParseError:
                read[target] = ""
        return read[target]

    return words


def _style_names(styles: ElementTree.Element | None) -> dict[str, str]:
    if styles is None:
        return {}
    names = {}
    for style in styles.iter(f"{_W}style"):
        name = style.find(f"{_W}name")
        if name is not None:
            names[style.get(f"{_W}styleId", "")] = name.get(f"{_W}val", "")
    return names


def _blocks(pieces: Iterable[bytes], styles: dict[str, str], numbers: WordNumbering,
            charts: Callable[[str], str]) -> Iterator[tuple[str, int, str]]:
    """(kind, heading level, text) for each paragraph and table of the body, in order, those
    in content controls too, parsed as the XML streams in: each is let go once read, so memory
    holds one paragraph, not the whole tree (ElementTree took 3.3 GB for 190 MB of empty
    paragraphs)."""
    parser = ElementTree.XMLPullParser(events=("start", "end"))
    open_: list[ElementTree.Element] = []  # the elements started and not yet ended
    holds_blocks: list[bool] = []  # for each: the body, or a wrapper in it (its children are blocks)
    for piece in chain(pieces, [b""]):
        if piece:
            parser.feed(piece)
        else:
            parser.close()  # an unclosed body is a ParseError, as a damaged file should be
        read: dict[int, tuple[ElementTree.Element, int]] = {}  # children read whole, per parent
        for event, element in parser.read_events():
            if event == "start":
                holds_blocks.append(element.tag == f"{_W}body" and len(open_) == 1 or (
                    element.tag in _WRAPPERS and bool(holds_blocks) and holds_blocks[-1]))
                open_.append(element)
                continue
            open_.pop()
            holds_blocks.pop()
            if not holds_blocks or not holds_blocks[-1]:
                continue
            parent = open_[-1]
            read[id(parent)] = (parent, read.get(id(parent), (parent, 0))[1] + 1)
            if element.tag == f"{_W}p":
                yield _paragraph(element, styles, numbers, charts)
            elif element.tag == f"{_W}tbl":
                yield "table", 0, _table(element)
        for parent, count in read.values():  # the first ones: those before were let go already
            del parent[:count]  # at once: one by one, each removal moves every later child


def _paragraph(p: ElementTree.Element, styles: dict[str, str], numbers: WordNumbering,
               charts: Callable[[str], str]) -> tuple[str, int, str]:
    """(kind, heading level, text) of a paragraph; a numbered one's text led by its number ("2.1 Wiring"),
    a chart's words after its text."""
    text = "\n\n".join(part for part in [_text(p).strip(), *(charts(c.get(_RELATION, "")) for c in p.iter(_CHART))]
                       if part)
    style = p.find(f"{_W}pPr/{_W}pStyle")
    style_id = style.get(f"{_W}val", "") if style is not None else ""
    label = numbers.label(p, style_id)
    if label and text:
        text = f"{label} {text}"
    name = styles.get(style_id, style_id)  # the name is "heading 1" whatever the language of its id
    if name.strip().lower() == "title":
        return "title", 0, text
    heading = _HEADING.match(name.strip())
    return ("heading", int(heading.group(1)), text) if heading else ("text", 0, text)


def _text(element: ElementTree.Element) -> str:
    """A paragraph's or a cell's text: its runs, with those in content controls, fields and
    text boxes; a paragraph inside (a text box's, a cell's) a paragraph of its own."""
    parts: list[str] = []
    _gather(element, parts)
    return "".join(parts).strip("\n")


def _gather(element: ElementTree.Element, parts: list[str]) -> None:
    for node in element:
        tag = node.tag
        if tag == _FALLBACK:  # what an older Word draws instead of the Choice just read
            continue
        if tag in (f"{_W}t", _MATH_TEXT):
            parts.append(node.text or "")
        elif tag == f"{_W}tab":
            parts.append("\t")
        elif tag in (f"{_W}br", f"{_W}cr"):
            parts.append("\n")
        else:
            _gather(node, parts)
            if tag == f"{_W}p" and parts and parts[-1] != "\n\n":
                parts.append("\n\n")


def _children(element: ElementTree.Element, tag: str) -> Iterator[ElementTree.Element]:
    """The children of `element` with `tag`, those inside content controls too."""
    for child in element:
        if child.tag == tag:
            yield child
        elif child.tag in _WRAPPERS:
            yield from _children(child, tag)


def _table(table: ElementTree.Element) -> str:
    """One line per row, its cells separated by " | ", so a row reads as one record; a merged
    cell (`gridSpan` across, `vMerge` down) is written in every place it covers
    (`crag.ingestion.formats.grid`)."""
    placed: list[list[tuple[int, str, int, str | None]]] = []  # per row: (column, text, columns, vMerge)
    for row in _children(table, f"{_W}tr"):
        column = _number(row.find(f"{_W}trPr/{_W}gridBefore"))  # a row that starts late
        cells = [(0, "", column, None)] if column else []
        for cell in _children(row, f"{_W}tc"):
            span = max(1, _number(cell.find(f"{_W}tcPr/{_W}gridSpan")) or 1)
            merge = cell.find(f"{_W}tcPr/{_W}vMerge")
            cells.append((column, " ".join(_text(cell).split()), span,
                          None if merge is None else merge.get(f"{_W}val", "continue")))
            column += span
        placed.append(cells)
    rows: list[list[Cell]] = []
    for at, cells in enumerate(placed):
        row: list[Cell] = []
        for column, text, span, merge in cells:
            if merge == "continue" and at and any(c[0] == column and c[3] for c in placed[at - 1]):
                continue  # covered by the cell above, written there
            below = 1
            while merge == "restart" and at + below < len(placed) and any(
                    c[0] == column and c[3] == "continue" for c in placed[at + below]):
                below += 1
            row.append((text, span, below))
        rows.append(row)
    return "\n".join(" | ".join(cells) for cells in spread(rows) if any(cells))


def _number(element: ElementTree.Element | None) -> int:
    """A `w:val` count (a span, cells skipped), 0 where missing or not a number, at most 1000."""
    try:
        return min(max(int(element.get(f"{_W}val", "0")), 0), 1000) if element is not None else 0
    except ValueError:
        return 0
