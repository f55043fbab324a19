"""PowerPoint (.pptx): one Document per slide, with its number and title: its text boxes,
tables, grouped shapes and charts (`crag.ingestion.formats.charts`), then its speaker notes;
needs the office extra (`crag-workflows[office]`).

python-pptx brings lxml (15 MB), which the default install has no room for.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from llama_index.core.schema import Document

from crag._compat.pptx import paragraph_properties
from crag.errors import IngestError
from crag.ingestion.cleaning import LABEL_CHARS
from crag.ingestion.formats import doc_id, require_bytes, short_reason
from crag.ingestion.formats.archive import Unpacker, open_zip
from crag.ingestion.formats.charts import chart_text
from crag.ingestion.formats.grid import spread
from crag.ingestion.formats.numbering import counter_text

EXTRA_HINT = "pip install 'crag-workflows[office]'"
_AUTO_NUMBER = "{http://schemas.openxmlformats.org/drawingml/2006/main}buAutoNum"
# <a:buAutoNum type="arabicPeriod">: how the number is counted, then what stands around it
_COUNTED = {"arabic": "decimal", "alphaLc": "lowerLetter", "alphaUc": "upperLetter",
            "romanLc": "lowerRoman", "romanUc": "upperRoman"}
_AROUND = {"Period": "{}.", "ParenR": "{})", "ParenBoth": "({})", "Plain": "{}"}


def read_slides(path: Path, data: bytes) -> Iterator[Document]:
    """One Document per slide with text: `slide` is its number, `section` its title."""
    require_bytes(path, data, "PowerPoint file")
    try:
        import pptx
    except ImportError:
        raise IngestError(f"{path}: reading .pptx needs the office extra: {EXTRA_HINT}") from None
    _check_members(path, data)
    try:
        deck = pptx.Presentation(io.BytesIO(data))
        slides = [_slide(slide) for slide in deck.slides]
    except (pptx.exc.PythonPptxError, zipfile.BadZipFile, zlib.error, SyntaxError, LookupError, TypeError,
            ValueError, AttributeError, OSError, EOFError) as exc:  # a damaged deck: lxml's are SyntaxErrors
        reason = short_reason(exc)
        raise IngestError(f"{path} is not a readable PowerPoint file ({reason}); save it again "
                          "as .pptx.") from None
    number = 0
    for index, (title, text) in enumerate(slides, start=1):
        if not text.strip():
            continue
        metadata = {"title": path.stem, "file_name": path.name, "slide": index}
        if title:
            metadata["section"] = title
        yield Document(text=text, id_=doc_id(path, number), metadata=metadata)
        number += 1


def _check_members(path: Path, data: bytes) -> None:
    """python-pptx reads every member of the archive whole, with zipfile, before a slide is
    seen (a 30 KB bzip2 bomb took it to 6 GB): every member is first streamed against the
    limit, so that what it is handed is known to unpack within bounds."""
    try:
        with open_zip(path, data) as archive:
            Unpacker(path, archive).check_all()
    except IngestError:
        raise
    except zipfile.BadZipFile:
        raise IngestError(f"{path} is not a PowerPoint file (not a zip archive; an old .ppt, or "
                          "damaged); save it again as .pptx.") from None
    except (zipfile.LargeZipFile, zlib.error, OSError, ValueError, EOFError, RuntimeError,
            NotImplementedError) as exc:
        raise IngestError(f"{path} is a damaged PowerPoint file ({short_reason(exc)}); save it again.") from None


def _slide(slide: object) -> tuple[str, str]:
    """The slide's title and its text: every shape's paragraphs, table rows and chart, then notes."""
    title_shape = slide.shapes.title  # type: ignore[attr-defined]
    title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
    skip = title_shape.shape_id if title_shape is not None else None
    parts = [text for shape in slide.shapes for text in _shape(shape, skip)]  # type: ignore[attr-defined]
    if slide.has_notes_slide:  # type: ignore[attr-defined]
        notes = slide.notes_slide.notes_text_frame  # type: ignore[attr-defined]
        if notes is not None and notes.text.strip():
            parts.append(notes.text)
    if len(title) > LABEL_CHARS:  # the whole slide typed in its title box: text, not a label
        parts.insert(0, title_shape.text_frame.text)
    return title, "\n\n".join(parts)  # bullets rarely end in a full stop: each its own sentence


def _shape(shape: object, title_id: int | None) -> Iterator[str]:
    """A shape's paragraphs, table rows or chart; a group's shapes, in order."""
    if getattr(shape, "shape_id", None) == title_id:
        return
    if getattr(shape, "has_text_frame", False):
        yield from _paragraphs(shape.text_frame.paragraphs)  # type: ignore[attr-defined]
    if getattr(shape, "has_table", False):
        yield from _table(shape.table)  # type: ignore[attr-defined]
    if getattr(shape, "has_chart", False):
        text = chart_text(shape.chart.part.blob)  # type: ignore[attr-defined]
        if text:
            yield text
    for inner in getattr(shape, "shapes", ()):  # a group
        yield from _shape(inner, title_id)


def _table(table: object) -> Iterator[str]:
    """A table's rows, cells between bars; a merged cell in every row and column it covers
    (`crag.ingestion.formats.grid`), where PowerPoint leaves the cells it covers empty."""
    rows = [[(" ".join(cell.text.split()), cell.span_width if cell.is_merge_origin else 1,
              cell.span_height if cell.is_merge_origin else 1)
             for cell in row.cells if not cell.is_spanned]
            for row in table.rows]  # type: ignore[attr-defined]
    return (" | ".join(cells) for cells in spread(rows))


def _paragraphs(paragraphs: list) -> Iterator[str]:
    """A text frame's paragraphs with text; a numbered one (`a:buAutoNum`) led by its number,
    counted as PowerPoint counts: on through its level, again after a paragraph of another kind."""
    counts: dict[int, int] = {}
    for paragraph in paragraphs:
        text = paragraph.text
        if not text.strip():
            continue
        properties = paragraph_properties(paragraph)
        auto = properties.find(_AUTO_NUMBER) if properties is not None else None
        level = paragraph.level
        counts = {at: n for at, n in counts.items() if at <= level}  # a deeper list ended
        if auto is None:
            counts.pop(level, None)
            yield text
            continue
        kind = auto.get("type", "arabicPeriod")
        counted = next((style for prefix, style in _COUNTED.items() if kind.startswith(prefix)), "decimal")
        around = next((form for suffix, form in _AROUND.items() if kind.endswith(suffix)), "{}.")
        try:
            start = int(auto.get("startAt", "1"))
        except ValueError:
            start = 1
        counts[level] = counts.get(level, start - 1) + 1
        yield f"{around.format(counter_text(counts[level], counted))} {text}"
