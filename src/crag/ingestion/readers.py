"""Readers for the file types `crag ingest` accepts, keyed by suffix in `READERS`: text
(.txt, .md, .html) here, documents (PDF, Word, PowerPoint, notebooks) and containers of records
(.jsonl, CSV/TSV) in `crag.ingestion.formats`, and images (.png, .jpg, .tif) when the `ocr` extra can read them."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.cleaning import clean
from crag.ingestion.files import MB, ReadLimits, Seen, read_checked, special_kind, walked
from crag.ingestion.formats import decode_text, doc_id
from crag.ingestion.formats.archive import unpack_limit
from crag.ingestion.formats.docx import read_docx
from crag.ingestion.formats.epub import read_epub
from crag.ingestion.formats.html import html_text
from crag.ingestion.formats.notebook import read_notebook
from crag.ingestion.formats.ocr import IMAGE_SUFFIXES, OcrLimits, installed, ocr_limits, read_image
from crag.ingestion.formats.ocr import INSTALL as OCR_INSTALL
from crag.ingestion.formats.pdf import read_pdf
from crag.ingestion.formats.records import read_records
from crag.ingestion.formats.slides import read_slides
from crag.ingestion.formats.xlsx import read_xlsx

Reader = Callable[[Path, bytes], Iterable[Document]]
"""`reader(path, data)`: the Documents in one file's bytes; `IngestError` when it cannot."""


def _read_text(path: Path, data: bytes) -> Iterator[Document]:
    return _text_documents(path, data)


READERS: dict[str, Reader] = {
    **dict.fromkeys((".txt", ".md", ".markdown", ".html", ".htm"), _read_text),
    ".jsonl": read_records,
    ".pdf": read_pdf,
    ".docx": read_docx,
    ".epub": read_epub,
    ".pptx": read_slides,
    ".ipynb": read_notebook,
    ".csv": read_records,
    ".tsv": read_records,
    ".xlsx": read_xlsx,
    ".xlsm": read_xlsx,
}
KINDS = ".txt, .md, .html, .jsonl, .pdf, .docx, .epub, .pptx, .ipynb, .csv, .tsv or .xlsx"
"""The supported types, as a sentence names them."""
if installed():  # without the extra a folder's photos are passed over, not each skipped with a line
    READERS.update(dict.fromkeys(IMAGE_SUFFIXES, read_image))
    KINDS = KINDS.replace(" or ", ", ") + ", .png, .jpg, .jpeg, .tif or .tiff"
SUPPORTED = tuple(READERS)


def find_files(paths: list[Path], extra: Collection[str] = ()) -> list[Path]:
    """Every supported file under `paths` (the `extra` suffixes too), sorted; a missing path is
    an error. Links inside a folder are passed over (`gather_files` says which)."""
    return gather_files(paths, extra)[0]


def gather_files(
    paths: list[Path], extra: Collection[str] = (), symlinks: str = "skip"
) -> tuple[list[Path], list[str], list[str]]:
    """Every supported file under `paths`, sorted; a line for each one passed over: a link
    (followed only with `symlinks="inside"`, and only to a place inside the folder given), a
    pipe, a device or a socket; and a line for each type crag does not read ("12 .zip files"),
    apart: a file crag was never meant to read is said, not counted as skipped.
    A path named in `paths` is read as named, a link too; a file found in a folder is a
    `WalkedPath`, opened only as the walk saw it (`crag.ingestion.files.open_checked`).

    Hidden files and folders (".git", ".DS_Store") are walked for supported files, but their
    others are not counted: a repository's objects are not documents anyone left out."""
    supported = (*SUPPORTED, *extra)
    found: list[Path] = []
    passed: list[str] = []
    unread: dict[str, list[Path]] = {}  # suffix -> the files of a type crag does not read
    for path in paths:
        if not path.exists():
            raise IngestError(f"{path} does not exist.")
        if path.is_dir():
            inside: list[Path] = []
            _walk(path, path.resolve(), supported, symlinks, set(), inside, passed, unread)
            found.extend(sorted(inside))
        elif not path.is_file():  # a FIFO or a device: reading it could wait forever
            raise IngestError(f"{path} is not a regular file (a pipe or a device); "
                              "give files or folders.")
        elif path.suffix.lower() in supported:
            found.append(path)
        else:
            raise IngestError(f"{path}: unsupported file type; crag reads {', '.join(supported)}.")
    unique: dict[Path, Path] = {}
    for path in found:  # a file reached twice (through a link inside the folder) is read once
        unique.setdefault(path.resolve(), path)
    found = list(unique.values())
    for path in found:
        try:
            str(path.resolve()).encode("utf-8")  # it becomes the documents' id, written as UTF-8
        except UnicodeEncodeError:
            raise IngestError(
                f"{path}: the file's name is not UTF-8; rename it, or leave it out."
            ) from None
    return found, passed, _not_read(unread, extra)


def _not_read(unread: dict[str, list[Path]], extra: Collection[str]) -> list[str]:
    """One line per type crag does not read, the most common first, naming its first file."""
    kinds = KINDS if not extra else f"{KINDS.replace(' or ', ', ')}, {', '.join(extra)}"
    lines = []
    for suffix, files in sorted(unread.items(), key=lambda item: (-len(item[1]), item[0])):
        more = len(files) - 1
        kind = f"{suffix} file{'s' * (more > 1)}" if suffix else f"file{'s' * (more > 1)} without a suffix"
        named = f"{files[0]}" if not more else f"{files[0]} and {more} more {kind}"
        if suffix in IMAGE_SUFFIXES:  # only without the ocr extra
            lines.append(f"{named}: not read; the text in images needs the ocr extra ({OCR_INSTALL}).")
        else:
            lines.append(f"{named}: not read; crag reads {kinds} (ingest.readers adds a type).")
    return lines


def _walk(folder: Path, root: Path, supported: tuple[str, ...], symlinks: str, seen: set[Path],
          found: list[Path], passed: list[str], unread: dict[str, list[Path]], hidden: bool = False) -> None:
    """Fill `found` with the supported files under `folder`, not following a link out of `root`,
    and `unread` with the others (unless hidden)."""
    if folder.resolve() in seen:  # a link back to a folder already walked
        return
    seen.add(folder.resolve())
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as exc:
        passed.append(f"Cannot read the folder {folder}: {exc.strerror or exc}.")
        return
    for entry in entries:
        path = Path(entry.path)
        is_dir = entry.is_dir()  # of the link's target, for a link
        is_hidden = hidden or entry.name.startswith(".")
        if not is_dir and path.suffix.lower() not in supported:
            if not is_hidden:
                unread.setdefault(path.suffix.lower(), []).append(path)
            continue
        if entry.is_symlink():
            target = path.resolve()
            what = "a folder" if is_dir else "a file"
            if symlinks != "inside":
                passed.append(f"{path} is a link (to {what}, {target}), not followed; set "
                              'ingest.symlinks = "inside" to follow links within the folder.')
                continue
            if not target.is_relative_to(root):
                passed.append(f"{path} is a link out of {root} (to {target}), not followed.")
                continue
        if is_dir:
            _walk(path, root, supported, symlinks, seen, found, passed, unread, is_hidden)
            continue
        try:
            status = entry.stat()
        except OSError:  # a dangling link
            passed.append(f"{path} is a link to nothing ({os.readlink(path)}); leave it out.")
            continue
        kind = special_kind(status.st_mode)
        if kind is not None:
            passed.append(f"{path} is {kind}, not a regular file; reading it could wait forever. Leave it out.")
        else:  # what the walk saw, checked again as it is opened: a link swapped in is not read
            found.append(walked(entry.path, Seen(status.st_dev, status.st_ino, entry.is_symlink())))


# The longest stretch between paragraph breaks that a splitter is given. NLTK's Punkt runs
# each regex over a whole paragraph under a 5 s wall-clock limit (nltk/redos.py), and the
# node parser hands it everything between "\n\n\n" breaks: one 5 MB paragraph could fail
# on a busy machine. 20,000 characters is about 10 ms of Punkt.
PARAGRAPH_LIMIT = 20_000
_BREAK = "\n\n\n"  # SentenceSplitter's paragraph separator; crag.text.sentences splits on it too


def read_documents(
    path: Path,
    data: bytes | None = None,
    readers: Mapping[str, Reader] | None = None,
    limits: ReadLimits | None = None,
    ocr_progress: Callable[[int, int], None] | None = None,
) -> Iterator[Document]:
    """Documents in one file (its bytes `data` when already read): one per file, section, page,
    slide, cell, group of rows or line of a .jsonl corpus, by type; a paragraph longer than
    PARAGRAPH_LIMIT is cut into shorter ones (text within the limit is unchanged). `readers`
    adds to or replaces the built-in ones, by suffix. `limits` bound the file's size, what
    its archive unpacks to, the text taken from it and the pages read by OCR (default: the
    `[ingest]` defaults); `ocr_progress(done, total)` follows those pages."""
    limits = limits or ReadLimits()
    reader = (readers or {}).get(path.suffix.lower()) or READERS.get(path.suffix.lower())
    if reader is None:
        raise IngestError(f"{path}: unsupported file type; crag reads {', '.join(SUPPORTED)}.")
    if data is None:
        data = read_checked(path, limits)[0]
    documents, text = [], 0
    token = unpack_limit.set(int(limits.max_unpacked_mb * MB))
    deadline = time.monotonic() + limits.max_seconds  # the file's whole time: OCR stops there
    ocr_token = ocr_limits.set(OcrLimits(limits.max_ocr_pages, ocr_progress, deadline, limits.max_seconds))
    try:
        for document in reader(path, data):
            clean(document)  # every reader's text as typed, its labels fit to cite
            text += len(document.text)
            if text > limits.max_text_mb * 1_000_000:
                raise IngestError(f"{path} holds over {limits.max_text_mb:g} million characters of "
                                  "text (ingest.max_text_mb); split it, or raise the limit. Left out.")
            documents.append(document)
    finally:
        unpack_limit.reset(token)
        ocr_limits.reset(ocr_token)
    for document in documents:
        if len(document.text) > PARAGRAPH_LIMIT:
            document.set_content(bounded_paragraphs(document.text))
        yield document


def bounded_paragraphs(text: str, limit: int = PARAGRAPH_LIMIT) -> str:
    """`text` with every stretch between "\n\n\n" breaks cut to at most `limit` characters, at
    the last paragraph, sentence or word boundary before it (mid-word only where none is)."""
    out: list[str] = []
    for block in text.split(_BREAK):
        while len(block) > limit:
            head = block[:limit]
            cut = max(head.rfind("\n\n"), head.rfind(". ") + 1)
            if cut <= 0:
                cut = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
            if cut <= 0:
                cut = limit
            out.append(block[:cut])
            block = block[cut:].lstrip()
        out.append(block)
    return _BREAK.join(out)


def _text_documents(path: Path, raw: bytes) -> Iterator[Document]:
    text = decode_text(path, raw)
    if "\x00" in text:
        raise IngestError(f"{path} looks binary (it contains NUL bytes); leave it out.")
    suffix = path.suffix.lower()
    if suffix in (".md", ".markdown"):
        yield from _markdown_documents(path, text)
        return
    title = path.stem
    if suffix in (".html", ".htm"):
        title, text, _ = html_text(text)
        title = title or path.stem
    if text.strip():
        metadata = {"title": title, "file": str(path), "file_name": path.name}
        yield Document(text=text, id_=doc_id(path, 0), metadata=metadata)


_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
# Raw HTML in Markdown (a README's badge, a <br>, a comment) is markup: rendered, it shows its
# inner text or nothing. A datahub README's first chunk was its badge's <a><img src=...> tags,
# quoted as an answer. Tags in `code spans` and indented code are text, and stay.
_TAG = re.compile(r"<!--.*?-->|</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>")
_CODE_SPAN = re.compile(r"(`+).*?\1")
# A heading's inline marks, as rendered: "*Partially* formatted `to_escape`" is a label's words, not its markup.
_HEADING_MARKS = (
    (re.compile(r"(`+)\s*(.+?)\s*\1"), r"\2"),  # a code span
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),  # a link or an image: its text
    (re.compile(r"(\*{1,3})(?=\S)(.+?)(?<=\S)\1"), r"\2"),  # *emphasis*, **strong**
    (re.compile(r"(?<!\w)(_{1,3})(?=\S)(.+?)(?<=\S)\1(?!\w)"), r"\2"),  # _emphasis_, not snake_case
)


def _without_tags(line: str) -> str:
    """A Markdown line with its raw HTML tags and one-line comments left out."""
    if line.startswith(("    ", "\t")):
        return line
    out, end = [], 0
    for span in _CODE_SPAN.finditer(line):
        out += [_TAG.sub("", line[end:span.start()]), span.group()]
        end = span.end()
    return "".join([*out, _TAG.sub("", line[end:])])


def _heading_text(heading: str) -> str:
    for mark, kept in _HEADING_MARKS:
        heading = mark.sub(kept, heading)
    return heading.strip()


def _markdown_documents(path: Path, text: str) -> Iterator[Document]:
    """One document per section: headings become metadata (the file's title, the section's
    heading path) without their inline marks, never text, so "# Beta" cannot reach an answer as
    a sentence; raw HTML tags outside code are left out."""
    sections: list[tuple[list[str], list[str]]] = [([], [])]
    trail: list[tuple[int, str]] = []  # (level, heading) of the enclosing headings
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading is None:
            sections[-1][1].append(line if fenced else _without_tags(line))
            continue
        level = len(heading.group(1))
        trail = [(lv, h) for lv, h in trail if lv < level] + [(level, _heading_text(heading.group(2)))]
        sections.append(([h for _, h in trail], []))
    headings = [h for trail_, _ in sections for h in trail_[-1:]]
    title = headings[0] if headings else path.stem
    number = 0
    for trail_, lines in sections:
        body = "\n".join(lines).strip()
        if not body:
            continue
        metadata = {"title": title, "file": str(path), "file_name": path.name}  # cited, linked like any file
        if trail_ and trail_ != [title]:
            metadata["section"] = " / ".join(trail_)
        yield Document(text=body, id_=doc_id(path, number), metadata=metadata)
        number += 1

