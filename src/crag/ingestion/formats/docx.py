"""Word (.docx): paragraphs and tables, one Document per section under the Heading styles.

Read with the standard library (zipfile and ElementTree): python-docx brings lxml, 15 MB
that the default install has no room for, and a .docx body is a few plain XML elements. The
body is parsed as it unpacks (`crag.ingestion.formats.archive`), one paragraph at a time.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path
from xml.etree import ElementTree

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.formats import doc_id, require_bytes, short_reason
from crag.ingestion.formats.archive import Unpacker, open_zip
from crag.ingestion.formats.table import row_groups

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)


def read_docx(path: Path, data: bytes) -> Iterator[Document]:
    """One Document per section, and per group of a table's rows; `section` is the heading
    path ("Setup / Wiring")."""
    require_bytes(path, data, "Word document")
    title, sections = _sections(path, data)
    number = 0
    for headings, paragraphs, tables in sections:
        metadata = {"title": title, "file_name": path.name}
        if headings:
            metadata["section"] = " / ".join(headings)
        texts = ["\n\n".join(paragraphs)] if paragraphs else []
        texts += [text for rows in tables for text in row_groups(rows)]
        for text in texts:
            yield Document(text=text, id_=doc_id(path, number), metadata=dict(metadata))
            number += 1


def _sections(path: Path, data: bytes) -> tuple[str, list[tuple[list[str], list[str], list[list[str]]]]]:
    """The document's title and its sections: (heading path, paragraphs, tables' rows) each."""
    try:
        archive = open_zip(path, data)
    except zipfile.BadZipFile:
        raise IngestError(f"{path} is not a Word document (not a zip archive; an old .doc, "
                          "or damaged); save it again as .docx.") from None
    title = path.stem
    sections: list[tuple[list[str], list[str], list[list[str]]]] = [([], [], [])]
    trail: list[tuple[int, str]] = []
    try:
        with archive:
            names = set(archive.namelist())
            if "word/document.xml" not in names:
                raise IngestError(f"{path} is a zip archive but not a Word document "
                                  "(no word/document.xml); leave it out.")
            unpacker = Unpacker(path, archive)
            styles = _style_names(ElementTree.fromstring(unpacker.read("word/styles.xml"))
                                  if "word/styles.xml" in names else None)
            for kind, level, text in _blocks(unpacker.stream("word/document.xml"), styles):
                if kind == "title" and text:
                    title = text
                elif kind == "heading" and text:
                    trail = [(lv, h) for lv, h in trail if lv < level] + [(level, text)]
                    sections.append(([h for _, h in trail], [], []))
                elif kind == "table" and text:
                    sections[-1][2].append(text.split("\n"))
                elif text.strip():
                    sections[-1][1].append(text)
    except IngestError:
        raise
    except (ElementTree.ParseError, zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError,
            EOFError, RuntimeError, NotImplementedError) as exc:
        raise IngestError(f"{path} is a damaged Word document ({short_reason(exc)}); save it again.") from None
    return title, sections


def _style_names(styles: ElementTree.Element | None) -> dict[str, str]:
    if styles is None:
        return {}
    names = {}
    for style in styles.iter(f"{_W}style"):
        name = style.find(f"{_W}name")
        if name is not None:
            names[style.get(f"{_W}styleId", "")] = name.get(f"{_W}val", "")
    return names


def _blocks(pieces: Iterable[bytes], styles: dict[str, str]) -> Iterator[tuple[str, int, str]]:
    """(kind, heading level, text) for each paragraph and table of the body, in order, parsed
    as the XML streams in: each is let go once read, so memory holds one paragraph, not the
    whole tree (ElementTree took 3.3 GB for 190 MB of empty paragraphs)."""
    parser = ElementTree.XMLPullParser(events=("start", "end"))
    depth, body = 0, None
    for piece in chain(pieces, [b""]):
        if piece:
            parser.feed(piece)
        else:
            parser.close()  # an unclosed body is a ParseError, as a damaged file should be
        read = 0  # children of the body read whole in this piece: the first ones in it
        for event, element in parser.read_events():
            if event == "start":
                depth += 1
                if depth == 2 and element.tag == f"{_W}body":
                    body = element
                continue
            depth -= 1
            if element is body:
                body = None
            elif body is not None and depth == 2:
                read += 1
                if element.tag == f"{_W}p":
                    yield _paragraph(element, styles)
                elif element.tag == f"{_W}tbl":
                    yield "table", 0, _table(element)
        if body is not None:
            del body[:read]  # at once: one by one, each removal moves every later child


def _paragraph(p: ElementTree.Element, styles: dict[str, str]) -> tuple[str, int, str]:
    text = _text(p).strip()
    style = p.find(f"{_W}pPr/{_W}pStyle")
    style_id = style.get(f"{_W}val", "") if style is not None else ""
    name = styles.get(style_id, style_id)  # the name is "heading 1" whatever the language of its id
    if name.strip().lower() == "title":
        return "title", 0, text
    heading = _HEADING.match(name.strip())
    return ("heading", int(heading.group(1)), text) if heading else ("text", 0, text)


def _text(element: ElementTree.Element) -> str:
    parts = []
    for node in element.iter():
        if node.tag == f"{_W}t" and node.text:
            parts.append(node.text)
        elif node.tag == f"{_W}tab":
            parts.append("\t")
        elif node.tag in (f"{_W}br", f"{_W}cr"):
            parts.append("\n")
    return "".join(parts)


def _table(table: ElementTree.Element) -> str:
    """One line per row, its cells separated by " | ", so a row reads as one record."""
    rows = []
    for row in table.iter(f"{_W}tr"):
        cells = [" ".join(_text(cell).split()) for cell in row.findall(f"{_W}tc")]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)
