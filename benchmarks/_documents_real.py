"""crag on the real-world document set (benchmarks/real_documents; `_real_set` reads it):
`python benchmarks/documents.py --real` runs it (`--smoke`: the questions on its three smallest
files, without the set's own checks, which tests/test_real_documents_set.py runs). Every
measure is of crag as shipped:

    sources      the folder ingested with `crag.ingest`, each question asked offline through
                 `build_workflow` (no keys, no web): first-source-right when the first source
                 names the question's file and place (page, section, cell, slide, CSV rows),
                 any-source-right when some source does. Target: first-source-right >= 0.90.
    misses       each miss told by where the answer was lost, the first stage that fails:
                 reader (crag's text for that place lacks the answer), chunking (no chunk at that
                 place holds it whole), retrieval (no chunk from that place reached the grader),
                 grading (one did, the verdict was "incorrect": with a web search, the run
                 would have gone to the web), grade order (another chunk was graded higher),
                 synthesis (graded highest, yet the answer cites another chunk first).
    files        read, skipped (with crag's one-line reason), and silently empty: a file of the
                 folder with no chunk in the index and no line saying why. Must be 0.
    pages/s      reading every PDF in the folder that ingest read (`read_documents`), median of
                 --runs after one warm-up read, in this process.
    peak RSS     of `crag ingest` of the folder in a child (`_harness.peak_rss_mb`). Target <= 300 MB.
    ligatures    words a font's Unicode map broke by dropping a ligature's first letters
                 ("signiicant", "irst", "inancial"), counted per PDF in crag's text: a fixed
                 list of the broken forms this set's PDFs showed before `formats/pdf_fonts.py`.
"""

from __future__ import annotations

import re
import shutil
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import _harness
import pypdf
import _real_set as real_set
from _harness import INGEST, peak_rss_mb
from _real_set import FILES, Question, names_place, normalise

import crag
from crag.app.cli import PARTIAL
from crag.config import Settings
from crag.events import CragResult, Verdict
from crag.index.store import ChunkIndex
from crag.ingestion.readers import read_documents
from crag.trace import Location, file_id
from crag.workflows.factory import build_workflow


@dataclass
class Asked:
    question: Question
    result: CragResult
    first_right: bool
    any_right: bool
    lost_at: str | None  # None when the first source is right


def report(folder: Path, runs: int, run: _harness.Run) -> None:
    """Print the real-world set's tables (markdown) for docs/measured.md."""
    asking, files = real_set.questions(), [FILES]
    if run.smoke:
        smallest = sorted({q.path for q in asking}, key=lambda p: p.stat().st_size)[:3]
        asking, files = [q for q in asking if q.path in smallest], smallest
        run.skip("the real-world set's checks, and all but its three smallest files",
                 "smoke size (tests/test_real_documents_set.py checks the set)")
    elif wrong := real_set.problems():
        raise SystemExit("the real-world set is not sound:\n  " + "\n  ".join(wrong))
    index = folder / "real-index"
    for old in (index, folder / "rss-index"):  # a --keep folder's last run: ingest would skip every file
        shutil.rmtree(old, ignore_errors=True)
    ingested = crag.ingest(files, index)
    chunks = ChunkIndex.load(index)
    asked = ask_all(folder, index, chunks, asking)
    questions = len(asked)
    read_files = [p for f in files for p in (sorted(f.rglob("*")) if f.is_dir() else [f]) if p.is_file()]
    print(f"\n| real-world set: {len(read_files)} files, {questions} questions | share |\n|---|---|")
    print(f"| first source names the file and place (target ≥ 0.90) | {sum(a.first_right for a in asked) / questions:.3f} |")
    print(f"| some source names the file and place | {sum(a.any_right for a in asked) / questions:.3f} |")
    for kind in sorted({a.question.kind for a in asked}):
        of_kind = [a for a in asked if a.question.kind == kind]
        print(f"| first source right, {kind} questions ({len(of_kind)}) | "
              f"{sum(a.first_right for a in of_kind) / len(of_kind):.3f} |")
    for a in asked:
        if not a.first_right:
            first = a.result.sources[0].citation() or a.result.sources[0].title if a.result.sources else "no source"
            print(f"  miss ({a.lost_at}): {a.question.id} {a.question.where()}: {a.question.question} "
                  f"-> {first} [{a.result.verdict}]")

    per_file = Counter(node.metadata.get("file") for node in chunks.nodes)
    said = ingested.skipped + ingested.empty
    # recorded as read with no chunk, or not recorded at all, and no line saying why
    silent = [str(p) for p in read_files
              if not per_file[file_id(str(p.resolve()))] and not any(str(p) in line for line in said)]
    print(f"\n| files | count |\n|---|---|\n| read | {ingested.files_read} |")
    print(f"| skipped, with a reason | {ingested.files_skipped} |\n| empty, with a reason | {ingested.files_empty} |")
    print(f"| silently empty (must be 0) | {len(silent)} |")
    for line in said:
        print(f"  {line.replace(str(FILES) + '/', '')}")
    for name in silent:
        print(f"  silent: {name}")

    pdfs = [p for p in read_files if p.suffix == ".pdf" and not any(str(p) in line for line in said)]
    pages = sum(len(pypdf.PdfReader(p).pages) for p in pdfs)
    rate = pages / read_seconds(pdfs, runs) if pdfs else 0.0
    print(f"\n| the folder | figure |\n|---|---|\n| PDFs read (crag read_documents), {pages} pages | {rate:.0f} pages/s |")
    rss = None
    if run.smoke:  # the fixtures' peak RSS takes the same path, where Chromium prints their PDF
        run.skip("the real-world set's peak RSS", "smoke size")
    else:  # crag ingest exits with PARTIAL when it skipped a file with its reason (the scanned page)
        rss = peak_rss_mb(INGEST, *map(str, files), "--index", str(folder / "rss-index"), ok=(0, PARTIAL))
        print(f"| peak RSS, `crag ingest` of the folder (target ≤ 300) | {rss:.0f} MB |")
    broken = {p.name: n for p in pdfs if (n := broken_ligatures(p))}
    print(f"| words broken by a font's ligature map, in crag's text of the PDFs | {sum(broken.values())} |")
    for name, n in sorted(broken.items()):
        print(f"  {name}: {n}")
    first_right = sum(a.first_right for a in asked) / questions
    run.figures["real-world set"] = {
        "questions": questions, "first_source_right": first_right,
        "some_source_right": sum(a.any_right for a in asked) / questions,
        "files_read": ingested.files_read, "files_skipped": ingested.files_skipped,
        "silently_empty": len(silent), "pdf_pages_per_second": rate, "peak_rss_mb": rss,
        "ligature_broken_words": sum(broken.values())}
    run.goal("real-world set: first source names the file and place", first_right, at_least=0.90)
    run.goal("real-world set: files silently empty", len(silent), at_most=0)
    run.goal("real-world set: peak RSS of crag ingest, MB", rss, at_most=300)


_BROKEN = re.compile(r"\b(?:signii\w*|conid\w*|irst|inal\w*|inancial\w*|eld|beneit\w*|speciic\w*|classiied)\b")


def broken_ligatures(path: Path) -> int:
    """How many words of crag's text of `path` are ones a ligature map broke (the module's docstring)."""
    return sum(len(_BROKEN.findall(d.text)) for d in read_documents(path))


def ask_all(folder: Path, index: Path, chunks: ChunkIndex, questions: list[Question]) -> list[Asked]:
    (folder / "crag.toml").write_text("")  # the defaults, whatever crag.toml the current folder has
    settings = Settings.load(config_file=folder / "crag.toml", env={},
                             index={"path": index}, web_search={"kind": "none"})
    workflow = build_workflow(settings)
    out = []
    for q in questions:
        result = workflow.ask(q.question)
        rights = [names(s.doc_id, s, q) for s in result.sources]
        first = bool(rights) and rights[0]
        out.append(Asked(q, result, first, any(rights), None if first else lost_at(q, result, chunks)))
    return out


def names(doc_id: str | None, location: Location, q: Question) -> bool:
    """Whether a document id and location name the question's file and place; the id leads with
    the file's id (`crag.ingestion.formats.doc_id`), for every kind, a text file's too."""
    key = file_id(str(q.path.resolve()))
    return bool(doc_id) and doc_id.split("#")[0] == key and names_place(location, q)


def lost_at(q: Question, result: CragResult, chunks: ChunkIndex) -> str:
    """The first stage at which the question's answer was lost (see the module's docstring)."""
    answer = normalise(q.answer)
    if q.kind == "scanned" or answer not in normalise(place_text(q)):
        return "reader"
    here = [n for n in chunks.nodes if names(n.metadata.get("doc_id"), Location(**Location.fields(n.metadata)), q)]
    if not any(answer in normalise(n.get_content()) for n in here):
        return "chunking"
    ids = {n.node_id for n in here}
    if not ids & {g.chunk_id for g in result.grades}:
        return "retrieval"
    if result.verdict is Verdict.INCORRECT:
        return "grading"
    return "synthesis" if max(result.grades, key=lambda g: g.score).chunk_id in ids else "grade order"


def place_text(q: Question) -> str:
    """crag's text for the question's place: its reader's documents at that place, joined."""
    documents = read_documents(q.path)
    return "\n".join(d.text for d in documents
                     if names(d.id_, Location(**Location.fields(d.metadata)), q))


def read_seconds(paths: list[Path], runs: int) -> float:
    def read_all() -> None:
        for path in paths:
            for _ in read_documents(path):
                pass

    read_all()  # warm: imports and the page cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        read_all()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
