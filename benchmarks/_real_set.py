"""The real-world document set in benchmarks/real_documents: public files, their sources and
licenses (`sources.json`) and questions on them (`questions.jsonl`), with the checks that keep
the set honest: every file listed with its license and hash, every answer on its expected page.

A question names its file and where in it the answer sits, by the file's kind: `page` (a PDF's
page, 1-based, whatever its label), `section` (an EPUB chapter), `cell` (a notebook's cell,
1-based), `slide`, `line` (a CSV line, the header line 1); a DOCX, HTML, Markdown or text file
by the file alone. `kind` is "prose", "table" or "scanned"; a scanned page has no text layer,
so its answer is checked against the `transcript` of the page, read off the image by eye.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pypdf

ROOT = Path(__file__).parent / "real_documents"
FILES = ROOT / "files"
PLACES = ("page", "section", "cell", "slide", "line")


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    file: str  # relative to FILES
    answer: str
    kind: str
    page: int | None = None
    section: str | None = None
    cell: int | None = None
    slide: int | None = None
    line: int | None = None
    transcript: str | None = None

    @property
    def path(self) -> Path:
        return FILES / self.file

    def where(self) -> str:
        """The place, as a person would say it: "us-001.pdf p. 2", "deck.pptx slide 1"."""
        place = next((f"{name} {getattr(self, name)}" for name in PLACES if getattr(self, name)), "")
        return f"{self.file} {place.replace('page ', 'p. ')}".strip()


def sources() -> list[dict]:
    return json.loads((ROOT / "sources.json").read_text(encoding="utf-8"))


def questions() -> list[Question]:
    lines = (ROOT / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [Question(**json.loads(line)) for line in lines if line.strip()]


_FOLD = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2010": "-",
                       "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
                       "\u2060": "", "\u00ad": ""})


def normalise(text: str) -> str:
    """Case, Unicode compatibility forms, curly quotes, dashes and whitespace folded: the
    answer is matched on what the page says, not on how it was typeset."""
    return " ".join(unicodedata.normalize("NFKC", text).translate(_FOLD).lower().split())


@cache
def pdf_pages(path: Path) -> tuple[str, ...]:
    """Each page's text layer, as pypdf extracts it (independent of crag's reader)."""
    return tuple(page.extract_text() or "" for page in pypdf.PdfReader(path).pages)


def expected_text(q: Question) -> str:
    """The text at the question's place: a PDF page's text layer (pypdf), a CSV line, a notebook
    cell's source; for the other kinds, what crag's reader gives for that section, slide or file."""
    if q.page is not None:
        return pdf_pages(q.path)[q.page - 1]
    if q.line is not None:
        return q.path.read_text(encoding="utf-8").splitlines()[q.line - 1]
    if q.cell is not None:
        return "".join(json.loads(q.path.read_text(encoding="utf-8"))["cells"][q.cell - 1]["source"])
    from crag.ingestion.readers import read_documents

    return "\n".join(d.text for d in read_documents(q.path)
                     if (q.section is None or d.metadata.get("section") == q.section)
                     and (q.slide is None or d.metadata.get("slide") == q.slide))


def problems() -> list[str]:
    """Every way the set is not what it says: a file not listed or listed without a license, a
    hash that differs, a question whose answer is not on its page. Empty when the set is sound."""
    found: list[str] = []
    listed = {entry["file"]: entry for entry in sources()}
    on_disk = {str(p.relative_to(FILES)) for p in FILES.rglob("*") if p.is_file()}
    found += [f"{name}: in the folder but not in sources.json" for name in sorted(on_disk - set(listed))]
    found += [f"{name}: in sources.json but not in the folder" for name in sorted(set(listed) - on_disk)]
    for name, entry in sorted(listed.items()):
        if not entry.get("license") or not entry.get("url"):
            found.append(f"{name}: no license or no source url in sources.json")
        if name in on_disk and hashlib.sha256((FILES / name).read_bytes()).hexdigest() != entry.get("sha256"):
            found.append(f"{name}: its sha256 differs from sources.json")
    seen: set[str] = set()
    for q in questions():
        found += question_problems(q, listed, seen)
    return found


def question_problems(q: Question, listed: dict, seen: set[str]) -> list[str]:
    if q.id in seen:
        return [f"{q.id}: the id is used twice"]
    seen.add(q.id)
    if q.file not in listed:
        return [f"{q.id}: {q.file} is not in sources.json"]
    if q.path.suffix == ".pdf" and q.page is None:
        return [f"{q.id}: a PDF question needs its page"]
    if q.kind == "scanned":
        if normalise(expected_text(q)):
            return [f"{q.id}: marked scanned, but {q.where()} has a text layer"]
        text = q.transcript or ""
    else:
        text = expected_text(q)
    if normalise(q.answer) not in normalise(text):
        return [f"{q.id}: the answer {q.answer!r} is not on {q.where()}"]
    return []


_ROWS = re.compile(r"(\d+)-(\d+)")


def names_place(location: object, q: Question) -> bool:
    """Whether a source's location (a `crag.events.Source`, or a chunk's `Location`) is the
    question's place in its file; the file itself is matched by the caller."""
    if q.page is not None:
        labels = pypdf.PdfReader(q.path).page_labels
        return getattr(location, "page", None) == labels[q.page - 1]
    if q.line is not None:
        rows = _ROWS.fullmatch(getattr(location, "rows", None) or "")
        return bool(rows) and int(rows[1]) <= q.line <= int(rows[2])
    return all(getattr(location, name, None) == getattr(q, name)
               for name in ("section", "cell", "slide") if getattr(q, name) is not None)
