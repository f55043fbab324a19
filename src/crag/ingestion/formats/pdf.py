"""PDF: the text layer, one Document per page, with the page's own label.

pypdf, measured against pypdfium2 on two manuals (docs/guide/documents.md): the same words
to 99% once hyphens are joined, at ~100 pages/s against ~1,200, but pure Python and 4 MB
against a 9 MB native library that would push the default install past its 400 MB budget.
Text extraction is well below the cost of embedding a page, so the smaller one is used.
"""

from __future__ import annotations

import io
import logging
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.formats import doc_id, pdf_damage, require_bytes, short_reason
from crag.ingestion.formats.ocr import no_text_hint, scanned_pages
from crag.ingestion.formats.pdf_fonts import join_split_ligatures, mend_ligatures, restore_maps
from crag.ingestion.formats.pdf_tables import PageRuns, PageTables
from crag.ingestion.formats.running_lines import drop_running_lines
from crag.ingestion.formats.table import row_groups

# pypdf reports what it repairs through logging; with no handler configured Python prints
# those records on stderr, where each skipped file must be one line and a repair is none.
logging.getLogger("pypdf").setLevel(logging.CRITICAL)

_HYPHENATED = re.compile(r"(\w)-[ \t]*\n[ \t]*([a-z])")  # "declara-\ntions"; "Wi-\nFi" stays


def read_pdf(path: Path, data: bytes) -> Iterator[Document]:
    """One Document per page that has text, and one per group of a table's rows (led by its
    header, as a CSV's are: `crag.ingestion.formats.pdf_tables`); `page` is the page's label
    ("iv", "12"), and `section` the heading path the PDF's outline (its bookmarks) gives the
    page, where it has one. With the `ocr` extra, a page with no text layer is read from its
    images (`ocr`: True)."""
    require_bytes(path, data, "PDF")
    pages, tables, labels, title, sections = _extract(path, data)
    scanned = scanned_pages(path, data, pages)  # the pages with no text layer, read by OCR
    pages = [join_split_ligatures(scanned.get(index, found.text if found else text))
             for index, (text, found) in enumerate(zip(pages, tables, strict=True))]
    if not any(text.strip() for text in pages) and not any(tables):
        raise IngestError(f"{path} has no text layer (a scanned or image-only PDF); "
                          + no_text_hint(path))
    pages = drop_running_lines([join_hyphenated(text) for text in pages])
    number = 0
    for index, text in enumerate(pages):
        metadata = {"title": title, "file_name": path.name, "page": labels[index]}
        if index in scanned:
            metadata["ocr"] = True
        if sections[index]:
            metadata["section"] = sections[index]
        parts = [text.strip()] if text.strip() else []
        if tables[index]:
            parts += [join_split_ligatures(group) for rows in tables[index].tables for group in row_groups(rows)]
        for part in parts:
            yield Document(text=part, id_=doc_id(path, number), metadata=dict(metadata))
            number += 1


def _extract(
    path: Path, data: bytes
) -> tuple[list[str], list[PageTables | None], list[str], str, list[str | None]]:
    """Each page's text, each page's tables, each page's label, the document's title, each
    page's outline section."""
    import pypdf
    from pypdf.errors import DependencyError, FileNotDecryptedError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reader = pypdf.PdfReader(io.BytesIO(data), strict=False)
            if reader.is_encrypted and not _opens_without_password(reader):
                raise IngestError(f"{path} is encrypted (it needs a password); save a copy "
                                  "without one (e.g. `qpdf --decrypt`) or leave it out.")
            mend_ligatures(reader)  # "signiicantly" where a font's own map drops the "f"
            read = [_page_text_as_mended(reader, page) for page in reader.pages]
            pages, tables = [text for text, _ in read], [found for _, found in read]
            labels = _labels(reader, len(pages))
            title = _title(reader) or path.stem
            sections = _sections(reader, len(pages))
    except IngestError:
        raise
    except DependencyError:  # AES: pypdf decrypts it only with the cryptography package
        raise IngestError(f"{path} is encrypted with AES, which needs the aes extra "
                          "(pip install 'crag-workflows[aes]'), or a copy saved without encryption "
                          "(`qpdf --decrypt`).") from None
    except FileNotDecryptedError:
        raise IngestError(f"{path} is encrypted (it needs a password); save a copy "
                          "without one (e.g. `qpdf --decrypt`) or leave it out.") from None
    except pdf_damage() as exc:
        reason = short_reason(exc)
        raise IngestError(f"{path} is not a readable PDF (damaged or truncated: {reason}); "
                          "download or export it again.") from None
    return pages, tables, labels, title, sections


def _sections(reader: object, count: int) -> list[str | None]:
    """Each page's heading path from the outline: that of the last entry starting on or before
    the page ("Installation / Wiring"); None before the first, or without an outline."""
    starts: list[tuple[int, str]] = []

    def walk(items: list, path: list[str]) -> None:
        last: str | None = None
        for item in items:
            if isinstance(item, list):  # an entry's children follow it
                if last is not None:
                    walk(item, [*path, last])
                continue
            last = " ".join(str(getattr(item, "title", "") or "").split())
            page = reader.get_destination_page_number(item)  # type: ignore[attr-defined]
            if last and page is not None and 0 <= page < count:
                starts.append((page, " / ".join([*path, last])))

    try:
        walk(list(reader.outline), [])  # type: ignore[attr-defined]
    except pdf_damage():  # a broken outline leaves the pages without sections
        return [None] * count
    starts.sort(key=lambda start: start[0])  # stable: the outline's order within a page
    sections: list[str | None] = []
    current, pending = None, iter(starts)
    upcoming = next(pending, None)
    for page in range(count):
        while upcoming is not None and upcoming[0] <= page:
            current, upcoming = upcoming[1], next(pending, None)
        sections.append(current)
    return sections


def _page_text_as_mended(reader: object, page: object) -> tuple[str, PageTables | None]:
    """`_page_text`, or where pypdf refuses a map the ligature mender changed, the text of the
    fonts' own maps: the mender never makes a page unreadable that pypdf reads."""
    try:
        return _page_text(page)
    except pdf_damage():
        if not restore_maps(reader):  # nothing was mended: the damage is the file's own
            raise
        return _page_text(page)


def _page_text(page: object) -> tuple[str, PageTables | None]:
    """The page's text and its tables, its decoded content stream then let go: pypdf keeps
    every stream it decoded for as long as the reader lives, and a browser's PDF draws each
    word on its own (~100 kB a page decoded), so a 1,000-page file held ~100 MB of them."""
    from pypdf.generic import ArrayObject

    runs = PageRuns()
    text = page.extract_text(visitor_text=runs) or ""  # type: ignore[attr-defined]
    contents = page.get("/Contents")  # type: ignore[attr-defined]
    contents = contents.get_object() if contents is not None else None
    for stream in contents if isinstance(contents, ArrayObject) else [contents]:
        stream = stream.get_object() if stream is not None else None
        if hasattr(stream, "decoded_self"):  # an EncodedStreamObject; decoded again if asked
            stream.decoded_self = None
    return text, runs.tables()


def _opens_without_password(reader: object) -> bool:
    """A PDF locked only against editing opens with the empty password, as viewers do."""
    from pypdf import PasswordType

    return reader.decrypt("") != PasswordType.NOT_DECRYPTED  # type: ignore[attr-defined]


def _labels(reader: object, count: int) -> list[str]:
    """The page labels the PDF defines (/PageLabels), else the 1-based page numbers."""
    numbers = [str(n) for n in range(1, count + 1)]
    try:
        if "/PageLabels" not in reader.trailer["/Root"]:  # type: ignore[attr-defined]
            return numbers
        labels = [str(label) for label in reader.page_labels]  # type: ignore[attr-defined]
    except pdf_damage():  # a broken label tree still leaves the page numbers
        return numbers
    return labels if len(labels) == count and all(labels) else numbers


def _title(reader: object) -> str:
    try:
        title = (reader.metadata or {}).get("/Title")  # type: ignore[attr-defined]
    except pdf_damage():  # an unreadable info dictionary is not worth a skip
        return ""
    # Word's PDF export writes the source file's name ("Microsoft Word - x.docx"): no title.
    if not isinstance(title, str) or re.search(r"\.\w{2,4}$|^Microsoft ", title.strip()):
        return ""
    return " ".join(title.split())


def join_hyphenated(text: str) -> str:
    """A word hyphenated across a line end, joined ("declara-\\ntions" → "declarations")."""
    return _HYPHENATED.sub(r"\1\2", text)
