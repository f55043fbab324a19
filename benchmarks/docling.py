"""Text fidelity on docling's test documents: crag's readers and LlamaIndex's against docling's
own ground truth, file by file.

    python benchmarks/docling.py [--data DOCLING/tests/data]
    python benchmarks/docling.py --smoke     # a tiny local set, in seconds; offline

Without --data, docling's repository at a pinned commit (`COMMIT`) is downloaded from GitHub
once into benchmarks/out/ and its tests/data read. The files are every source file under
tests/data/<type>/sources/ of a type crag reads (`crag.ingestion.readers.SUPPORTED`) with a
ground truth, tests/data/<type>/groundtruth/<file name>.md (a PDF's: <stem>.md), as docling
names them. `--smoke` without --data reads a few files it writes itself (their text is their
ground truth) and names docling's data under `skipped`; with --data, the smallest file of each
type.

Measured, for crag (`crag.ingestion.readers.read_documents`, what `crag ingest` indexes) and
LlamaIndex's `SimpleDirectoryReader` with its default file extractors (those of
llama-index-readers-file where installed: documents.py's docstring says how; without them it
reads every file as text), in the same run on the same files:
    word recall    |truth ∩ read| / |truth| over bags of words, with multiplicity: each text
                   NFKC-normalised, lowercased and split into runs of letters and digits
                   (Markdown's marks, `|` and `#`, fall away). From the truth, docling's
                   `<!-- image -->` placeholders and a link's target (`[text](target)`) are
                   removed: a reader sees neither. crag's text is what it indexes: each
                   document's text, led by the file's title and each section heading where it
                   changes (both are embedded with every chunk, and shown to the model).
    4-gram recall  the same over the runs of four consecutive words: order kept.
Per file, and over all files weighted by the ground truth's size (a file a reader could not
read counts as 0). Goals: crag's word recall >= SimpleDirectoryReader's on every file both
read, >= 0.97 over all; crag's 4-gram recall >= 0.90 over all. Each file crag skipped is
printed with its line, and each file SimpleDirectoryReader did not read with its error.
"""

from __future__ import annotations

import atexit
import html
import io
import re
import shutil
import sys
import tarfile
import tempfile
import unicodedata
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import _harness

from crag.errors import IngestError
from crag.ingestion.readers import SUPPORTED, read_documents

COMMIT = "e1cb2b234c48ff29746b0f2f843d07f8e23905a0"
"""docling's commit whose tests/data is measured (its main branch when this was written)."""
ARCHIVE = f"https://codeload.github.com/docling-project/docling/tar.gz/{COMMIT}"
OUT = _harness.HERE / "out" / f"docling-{COMMIT[:12]}"
_WORD = re.compile(r"[^\W_]+")
_PLACEHOLDER = re.compile(r"<!--.*?-->", re.DOTALL)
# [text](target), ![alt](source); the text may hold one level of brackets and the target one of
# parentheses: "[[ 5 ]](#cite_note-5)" shows "[5]", not "cite note", and "[ducks](/wiki/Duck_(food))"
# shows "ducks", not "food)"
_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\((?:[^()]|\([^)]*\))*\)")


@dataclass(frozen=True)
class Source:
    kind: str  # docling's folder: pdf, docx, ...
    path: Path
    truth: Path


@dataclass
class Reading:
    """One reader's text of one file, or why it has none."""

    text: str = ""
    failed: str | None = None


def main() -> None:
    cli = _harness.parser(__doc__)
    # not `data`, which the harness takes for the shared dev sets
    cli.add_argument("--data", dest="tests_data", type=Path, help="a docling checkout's tests/data "
                     "(default: downloaded)")
    args = _harness.parse(cli, smoke={})
    with _harness.measured(__file__, args) as run:
        data = args.tests_data
        if data is None and args.smoke:
            run.skip("docling's test data", "smoke size: a few files written here instead (--data DIR measures)")
            data = tiny_set()
        elif data is None:
            data = download()
        sources, others = find_sources(data)
        if args.smoke and args.tests_data is not None:
            sources, others = smallest_of_each_kind(sources), []
        failed = report(sources, run) + report_others(others, run)
        run.goal("files that end in a reader's internal error (each would be a skip line)",
                 sum("internal error" in line for line in failed), at_most=0)


def find_sources(data: Path) -> tuple[list[Source], list[Path]]:
    """Every source file of a type crag reads that has a ground truth, by kind and name; and
    those without one (read too: none may stop a folder or be lost without a line)."""
    found, others = [], []
    for folder in sorted(p for p in data.glob("*/sources") if p.is_dir()):
        truths = folder.parent / "groundtruth"
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            if path.suffix.lower() not in SUPPORTED:
                continue
            truth = next((t for t in (truths / f"{path.name}.md", truths / f"{path.stem}.md") if t.is_file()), None)
            if truth is not None:
                found.append(Source(folder.parent.name, path, truth))
            else:
                others.append(path)
    if not found:
        raise SystemExit(f"no source file with a ground truth under {data}/*/sources: is it docling's tests/data?")
    return found, others


def smallest_of_each_kind(sources: list[Source]) -> list[Source]:
    kinds = sorted({s.kind for s in sources})
    return [min((s for s in sources if s.kind == kind), key=lambda s: s.path.stat().st_size) for kind in kinds]


def read_crag(path: Path) -> Reading:
    try:
        return Reading(indexed_text(list(read_documents(path))))
    except IngestError as exc:
        return Reading(failed=f"crag: skipped: {exc}")
    except Exception as exc:  # noqa: BLE001 - a reader's bug is a finding, printed, not the run's end
        return Reading(failed=f"crag: internal error: {type(exc).__name__}: {exc} ({path})")


def indexed_text(documents: list) -> str:
    """The documents' text in order, led by the file's title and by each section heading where
    it changes: crag embeds both with every chunk and shows them to the model."""
    parts: list[str] = [documents[0].metadata.get("title") or ""] if documents else []
    before: list[str] = []
    for document in documents:
        section = [s.strip() for s in (document.metadata.get("section") or "").split(" / ") if s.strip()]
        shared = next((i for i, (a, b) in enumerate(zip(before, section)) if a != b), min(len(before), len(section)))
        parts += [*section[shared:], document.text]
        before = section
    return "\n".join(parts)


def ground_truth(path: Path) -> str:
    """docling's Markdown as the words a reader sees: no placeholders, a link's text without its
    target, and character references as the characters they stand for (docling writes "&" in
    text as "&amp;" and "|" in a cell as "&#124;"; Markdown shows "&" and "|")."""
    return html.unescape(_LINK.sub(r"\2", _PLACEHOLDER.sub(" ", path.read_text(encoding="utf-8"))))


def read_sdr(path: Path) -> Reading:
    from llama_index.core import SimpleDirectoryReader

    try:  # raise_on_error: a reader's failure is the file's row, not a log line
        documents = SimpleDirectoryReader(input_files=[path], raise_on_error=True).load_data()
    except Exception as exc:  # noqa: BLE001 - whatever a third party's reader raises is its row's reason
        return Reading(failed=f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}")
    text = "\n".join(d.text for d in documents)
    return Reading(text) if text.strip() else Reading(failed="no text")


def sdr_readers() -> dict[str, str]:
    """SimpleDirectoryReader's default reader of each suffix (a suffix not listed is read as text)."""
    from llama_index.core.readers.file.base import _try_loading_included_file_formats

    return {suffix: reader.__name__ for suffix, reader in _try_loading_included_file_formats().items()}


def words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def recall(truth: list, read: list) -> tuple[int, int]:
    """(items of `truth` found in `read`, counted with multiplicity; items of `truth`)."""
    found = Counter(read)
    return sum(min(n, found[item]) for item, n in Counter(truth).items()), len(truth)


def grams(tokens: list[str], n: int = 4) -> list[tuple[str, ...]]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


@dataclass
class Row:
    source: Source
    truth_words: int
    crag: tuple[int, int, int, int] | None  # words found, words, 4-grams found, 4-grams
    sdr: tuple[int, int, int, int] | None


def score(truth: str, reading: Reading) -> tuple[int, int, int, int] | None:
    if reading.failed is not None:
        return None
    expected, got = words(truth), words(reading.text)
    return (*recall(expected, got), *recall(grams(expected), grams(got)))


def report(sources: list[Source], run: _harness.Run) -> list[str]:
    """Print the per-file table, the totals and the lines of the files not read; crag's lines."""
    readers = sdr_readers()
    rows, crag_failed, sdr_failed = [], [], []
    for source in sources:
        truth = ground_truth(source.truth)
        crag, sdr = read_crag(source.path), read_sdr(source.path)
        if crag.failed:
            crag_failed.append(crag.failed)
        if sdr.failed:
            sdr_failed.append(f"{source.kind}/{source.path.name}: {sdr.failed}")
        rows.append(Row(source, len(words(truth)), score(truth, crag), score(truth, sdr)))

    def share(part: tuple[int, int, int, int] | None, at: int) -> str:
        return "—" if part is None else f"{part[at] / part[at + 1]:.3f}" if part[at + 1] else "n/a"

    print(f"\n| docling tests/data ({len(rows)} files) | truth words | crag words | SDR words "
          "| crag 4-grams | SDR 4-grams | SDR reader |\n|---|---|---|---|---|---|---|")
    for row in rows:
        reader = readers.get(row.source.path.suffix.lower(), "text")
        print(f"| {row.source.kind}/{row.source.path.name} | {row.truth_words} | {share(row.crag, 0)} | "
              f"{share(row.sdr, 0)} | {share(row.crag, 2)} | {share(row.sdr, 2)} | {reader} |")

    def overall(pick: str, at: int, kinds: set[str] | None = None) -> float:
        chosen = [r for r in rows if kinds is None or r.source.kind in kinds]
        truth = sum(_truth_size(r, at) for r in chosen)
        found = sum(getattr(r, pick)[at] for r in chosen if getattr(r, pick) is not None)
        return found / truth if truth else float("nan")

    print("\n| over all, weighted by the truth's size | crag | SimpleDirectoryReader |\n|---|---|---|")
    print(f"| word recall | {overall('crag', 0):.3f} | {overall('sdr', 0):.3f} |")
    print(f"| 4-gram recall | {overall('crag', 2):.3f} | {overall('sdr', 2):.3f} |")
    for kind in sorted({r.source.kind for r in rows}):
        print(f"| word recall, {kind} | {overall('crag', 0, {kind}):.3f} | {overall('sdr', 0, {kind}):.3f} |")
    behind = [r for r in rows if r.crag and r.sdr and r.crag[1] and r.crag[0] / r.crag[1] < r.sdr[0] / r.sdr[1]]
    print(f"\nfiles both read where crag's word recall is below SimpleDirectoryReader's: {len(behind)}")
    for r in behind:
        print(f"  {r.source.kind}/{r.source.path.name}: {share(r.crag, 0)} < {share(r.sdr, 0)}")
    print(f"files crag skipped: {len(crag_failed)}")
    for line in crag_failed:
        print(f"  {line}")
    print(f"files SimpleDirectoryReader did not read: {len(sdr_failed)}")
    for line in sdr_failed:
        print(f"  {line}")
    print("SimpleDirectoryReader's readers: " + ", ".join(
        f"{suffix} {readers.get(suffix, 'text')}" for suffix in sorted({r.source.path.suffix.lower() for r in rows})))

    run.figures.update({
        "files": len(rows), "crag_word_recall": overall("crag", 0), "sdr_word_recall": overall("sdr", 0),
        "crag_4gram_recall": overall("crag", 2), "sdr_4gram_recall": overall("sdr", 2),
        "crag_skipped": len(crag_failed), "sdr_not_read": len(sdr_failed),
        "files_crag_below_sdr": [f"{r.source.kind}/{r.source.path.name}" for r in behind]})
    run.goal("files both read where crag's word recall < SimpleDirectoryReader's", len(behind), at_most=0)
    run.goal("crag word recall over all", overall("crag", 0), at_least=0.97)
    run.goal("crag 4-gram recall over all", overall("crag", 2), at_least=0.90)
    return crag_failed


def report_others(others: list[Path], run: _harness.Run) -> list[str]:
    """crag's reading of the source files without a ground truth: read, or skipped with a line."""
    failed = [reading.failed for path in others if (reading := read_crag(path)).failed]
    print(f"\nsource files without a ground truth: {len(others)}, crag read {len(others) - len(failed)}, "
          f"skipped {len(failed)}")
    for line in failed:
        print(f"  {line}")
    run.figures["without_truth"] = {"files": len(others), "skipped": len(failed)}
    return failed


def _truth_size(row: Row, at: int) -> int:
    """The truth's words (at 0) or 4-grams (at 2), whichever reader's score is at hand."""
    scored = row.crag or row.sdr
    if scored is not None:
        return scored[at + 1]
    return row.truth_words if at == 0 else max(row.truth_words - 3, 0)


def download() -> Path:
    """docling's tests/data at `COMMIT`, downloaded once into benchmarks/out/."""
    data = OUT / "tests" / "data"
    if data.is_dir():
        return data
    print(f"downloading docling {COMMIT[:12]} from GitHub ...", file=sys.stderr, flush=True)
    try:
        with urllib.request.urlopen(ARCHIVE, timeout=120) as response:
            archive = response.read()
    except OSError as exc:
        raise SystemExit(f"could not download {ARCHIVE} ({exc}); pass --data with a docling "
                         "checkout's tests/data") from None
    partial = Path(tempfile.mkdtemp(prefix="docling-", dir=OUT.parent))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        wanted = [m for m in tar.getmembers() if m.isfile() and "/tests/data/" in m.name]
        tar.extractall(partial, members=wanted, filter="data")
    [root] = list(partial.iterdir())  # docling-<commit>/
    shutil.move(str(root), OUT)
    shutil.rmtree(partial, ignore_errors=True)
    return data


SMOKE_FILES = {
    "md/sources/notes.md": "# Pumps\n\nThe north pump runs at 40 litres a minute.\n",
    "html/sources/page.html": ("<html><head><title>Valves</title></head><body><h1>Valves</h1>"
                               "<p>Each valve is checked in spring.</p></body></html>"),
    "csv/sources/rates.csv": "site,litres\nNorth,40\nSouth,35\n",
}
SMOKE_TRUTHS = {
    "md/groundtruth/notes.md.md": "# Pumps\n\nThe north pump runs at 40 litres a minute.\n",
    "html/groundtruth/page.html.md": "# Valves\n\nEach valve is checked in spring.\n",
    "csv/groundtruth/rates.csv.md": "| site | litres |\n|---|---|\n| North | 40 |\n| South | 35 |\n",
}


def tiny_set() -> Path:
    """A few files in docling's layout, each with its ground truth; removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="crag-docling-smoke-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for name, text in {**SMOKE_FILES, **SMOKE_TRUTHS}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


if __name__ == "__main__":
    main()
