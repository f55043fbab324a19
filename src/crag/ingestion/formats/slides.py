"""PowerPoint (.pptx): one Document per slide, with its number and title; needs the office
extra (`crag-workflows[office]`).

python-pptx brings lxml (15 MB), which the default install has no room for.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.cleaning import LABEL_CHARS
from crag.ingestion.formats import doc_id, require_bytes, short_reason
from crag.ingestion.formats.archive import Unpacker, open_zip

EXTRA_HINT = "pip install 'crag-workflows[office]'"


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
    """The slide's title and its text: every shape's paragraphs and table rows, then notes."""
    title_shape = slide.shapes.title  # type: ignore[attr-defined]
    title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
    parts = []
    for shape in slide.shapes:  # type: ignore[attr-defined]
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        if getattr(shape, "has_text_frame", False):
            parts.extend(p.text for p in shape.text_frame.paragraphs if p.text.strip())
        if getattr(shape, "has_table", False):
            parts.extend(" | ".join(c.text for c in row.cells) for row in shape.table.rows)
    if slide.has_notes_slide:  # type: ignore[attr-defined]
        notes = slide.notes_slide.notes_text_frame  # type: ignore[attr-defined]
        if notes is not None and notes.text.strip():
            parts.append(notes.text)
    if len(title) > LABEL_CHARS:  # the whole slide typed in its title box: text, not a label
        parts.insert(0, title_shape.text_frame.text)
    return title, "\n\n".join(parts)  # bullets rarely end in a full stop: each its own sentence
