"""EPUB (.epub): one Document per chapter (spine item), its title as `section`, the book's
title and authors (dc:title, dc:creator) as `title` and `author`.

Read with the standard library (zipfile, ElementTree, HTMLParser), as .docx is: an EPUB is a
zip of XHTML pages listed in order by one XML package file, and ebooklib would bring lxml
(15 MB) for what is a few dozen lines here. Every member is read against one budget of
unpacked bytes (`crag.ingestion.formats.archive`): five chapters of 150 MB each passed a
per-member limit.
"""

from __future__ import annotations

import posixpath
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote
from xml.etree import ElementTree

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.formats import doc_id, require_bytes, short_reason
from crag.ingestion.formats.archive import Unpacker, open_zip
from crag.ingestion.formats.html import html_text

_OPF = "{http://www.idpf.org/2007/opf}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
_XHTML = "{http://www.w3.org/1999/xhtml}"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_NCX_TYPE = "application/x-dtbncx+xml"
_PAGES = {"application/xhtml+xml", "text/html"}
_DAMAGED = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, ElementTree.ParseError, KeyError,
            OSError, ValueError, EOFError, RuntimeError, NotImplementedError)


def read_epub(path: Path, data: bytes) -> Iterator[Document]:
    """One Document per chapter with text; `section` is its title in the book's table of
    contents, else its first heading."""
    require_bytes(path, data, "EPUB book")
    try:
        chapters, title, author = _chapters(path, data)
    except IngestError:
        raise
    except _DAMAGED as exc:
        reason = short_reason(exc)
        raise IngestError(f"{path} is a damaged EPUB ({reason}); export or download it again.") from None
    number = 0
    for section, text in chapters:
        if not text.strip():
            continue
        metadata: dict[str, str] = {"title": title or path.stem, "file_name": path.name}
        if section:
            metadata["section"] = section
        if author:
            metadata["author"] = author
        yield Document(text=text.strip(), id_=doc_id(path, number), metadata=metadata)
        number += 1


def _chapters(path: Path, data: bytes) -> tuple[list[tuple[str, str]], str, str]:
    """[(chapter title, text)] in spine order, the book's title and its authors."""
    try:
        archive = open_zip(path, data)
    except zipfile.BadZipFile:
        raise IngestError(f"{path} is not an EPUB (not a zip archive; damaged, or another "
                          "format renamed); export it again as .epub.") from None
    with archive:
        names = set(archive.namelist())  # looked up once per chapter
        unpacker = Unpacker(path, archive)  # one budget for every member the book is read from
        container = _xml(unpacker, "META-INF/container.xml")
        rootfile = container.find(f".//{_CONTAINER}rootfile")
        opf_name = rootfile.get("full-path", "") if rootfile is not None else ""
        if not opf_name or opf_name not in names:
            raise IngestError(f"{path} is a zip archive but not a readable EPUB (its package "
                              f"file {opf_name or '(none named)'} is missing); export it again.")
        package = _xml(unpacker, opf_name)
        base = posixpath.dirname(opf_name)
        items = {i.get("id"): i for i in package.iter(f"{_OPF}item")}
        toc = _toc(unpacker, names, base, items)
        book_title = " ".join((package.findtext(f".//{_DC}title") or "").split())
        creators = (" ".join(c.text.split()) for c in package.iter(f"{_DC}creator") if c.text)
        author = ", ".join(c for c in creators if c)
        chapters = []
        for ref in package.iter(f"{_OPF}itemref"):
            item = items.get(ref.get("idref"))
            if item is None or item.get("media-type") not in _PAGES:
                continue
            if "nav" in (item.get("properties") or "").split():
                continue  # the table of contents itself: titles, not text
            name = _resolve(base, item.get("href", ""))
            if name not in names:
                continue
            _, text, heading = html_text(unpacker.read(name).decode("utf-8", "replace"))
            section = toc.get(name) or heading
            body = text.strip()
            if heading and body.startswith(heading):
                body = body[len(heading):]  # the title is metadata, as a Markdown heading is
            chapters.append((section, body))
    return chapters, book_title, author


def _toc(unpacker: Unpacker, names: set[str], base: str, items: dict) -> dict[str, str]:
    """Chapter titles by file, from the EPUB 3 nav document or the EPUB 2 NCX (first wins)."""
    titles: dict[str, str] = {}
    for item in items.values():
        name = _resolve(base, item.get("href", ""))
        is_nav = "nav" in (item.get("properties") or "").split()
        if name not in names or not (is_nav or item.get("media-type") == _NCX_TYPE):
            continue
        try:  # a table of contents that is not well-formed XML: chapters keep their headings
            tree = _xml(unpacker, name)
        except ElementTree.ParseError:
            continue
        if is_nav:
            for link in tree.iter(f"{_XHTML}a"):
                label = " ".join("".join(link.itertext()).split())
                target = _resolve(posixpath.dirname(name), link.get("href", ""))
                titles.setdefault(target, label)
        else:
            for point in tree.iter(f"{_NCX}navPoint"):
                label = " ".join((point.findtext(f"{_NCX}navLabel/{_NCX}text") or "").split())
                content = point.find(f"{_NCX}content")
                if content is not None:
                    titles.setdefault(_resolve(posixpath.dirname(name), content.get("src", "")), label)
    return {name: label for name, label in titles.items() if label}


def _resolve(base: str, href: str) -> str:
    """The archive name an href points at, relative to `base`, its #fragment dropped."""
    return posixpath.normpath(posixpath.join(base, unquote(href.split("#", 1)[0])))


def _xml(unpacker: Unpacker, name: str) -> ElementTree.Element:
    try:
        unpacker.archive.getinfo(name)
    except KeyError:
        raise IngestError(f"{unpacker.path} is a zip archive but not an EPUB (no {name}); export it again.") from None
    return ElementTree.fromstring(unpacker.read(name))
