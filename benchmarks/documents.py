"""Document readers: text fidelity, citation accuracy, speed and memory, crag against LlamaIndex.

    python benchmarks/documents.py [--pages 200] [--big-pages 1000] [--runs 3] [--keep DIR]
    python benchmarks/documents.py --real [--runs 3] [--keep DIR]
    python benchmarks/documents.py --smoke     # a little of both, in seconds; PDFs only with Chromium

Needs Chromium (`apt-get install -y chromium`) to print the PDFs, python-docx and python-pptx
(crag's test extra) to write the Word and PowerPoint files, and llama-index-readers-file with
docx2txt for SimpleDirectoryReader's default readers (without them it reads a PDF as bytes).
llama-index-readers-file pins pypdf<7, which crag's pypdf 7 satisfies in practice, so install
it beside crag without its pins: `pip install --no-deps --target benchmarks/out/deps
llama-index-readers-file docx2txt striprtf "pandas<3" beautifulsoup4 soupsieve pytz` and run
with `PYTHONPATH=src:benchmarks/out/deps`.

The fixtures are built in a temporary folder (or --keep DIR) from seeded filler prose, each
page or slide holding one distinctive fact sentence ("The Varnok relay trips at 37 amperes."):
    one.pdf      one column, one section per page (`page-break-before: always`)
    two.pdf      two columns (`column-count: 2`)
    running.pdf  one column with a running header and footer (fixed-position divs, which
                 Chromium prints on every page; checked on every page of the raw text layer)
    facts.pdf    20 pages, one fact on each
    prose.docx   python-docx paragraphs, no headings (one fact per three paragraphs)
    slides.pptx  python-pptx text boxes, one fact per slide
    tables.pdf   four HTML tables printed by Chromium, each under a heading and a paragraph:
                 numbers (10 rows), text cells that wrap (8), 50 rows over two pages (the
                 header row in <thead>, which Chromium repeats), nine narrow columns in 8pt
    tables.docx  the same shapes with other names, as python-docx writes Word tables
The PDFs are printed by headless Chromium (`crag.app.render.browser.print_pdf`), so their page
of each fact is known; each fact's page is checked in the PDF's raw text layer.

Measured, for crag's readers (`crag.ingestion.readers.read_documents`) and LlamaIndex's
`SimpleDirectoryReader` with its default file extractors, in the same run:
    fidelity     difflib.SequenceMatcher(autojunk=False).ratio() between the source's words
                 and the extracted words (each text split on whitespace; case and punctuation
                 kept), in reading order, the documents of a file joined in order. The source
                 is what a reader reads: the running header and footer are not part of it.
                 Targets: >= 0.98 one column and DOCX, >= 0.95 two columns.
    citations    (crag only) every fixture ingested into one index with `crag.ingest`; each
                 fact's question asked offline through `build_workflow` (no keys, no web);
                 correct when the first source names the fact's file and its page (PDF) or
                 slide (PPTX); a DOCX has no pages, so its file. Target >= 0.98. Two more
                 rows part the reader from the retriever: how often a cited source holds the
                 fact sentence, and how often that source names the fact's file and page.
    tables       (crag only) "What is the <column> of <row>?" for 18 cells of each tables
                 file, asked of the same index: the first source names the file and page;
                 a cited source holds the row (its key and the value on one line); the first
                 source's chunk holds the row and the column's name (a chunk of rows without
                 their header cannot say which number is which); the answer holds the row.
    pages/s      reading a --pages PDF (read_documents against load_data), median of --runs
                 after one warm-up read, in this process.
    peak RSS     of `crag ingest` on a --big-pages PDF (read, chunked, embedded, written), in
                 a child spawned by a small launcher that prints
                 resource.getrusage(RUSAGE_CHILDREN).ru_maxrss: a child of this process would
                 inherit this process's peak at exec. MB = 2**20 bytes. Target <= 300 MB.

--real measures crag on benchmarks/real_documents instead: 35 public files of the kinds a shared
drive holds (US government reports, tables and a scanned page as PDFs, a DOCX handbook, an EPUB,
HTML, Markdown, text, notebooks, CSVs, a slide), each with its source url, license and sha256 in
sources.json, and 60 questions in questions.jsonl, each naming the file and page (section, cell,
slide or CSV line) that answers it; `_real_set` checks every answer is on its page, and
`_documents_real` says what is measured (sources right, files silently empty, pages/s, peak RSS).
It needs neither Chromium nor LlamaIndex's file readers.

--smoke builds the Word and PowerPoint fixtures, and one.pdf and tables.pdf where Chromium is
found, with 2-page PDFs for pages/s and peak RSS; then the real-world set's questions on its
three smallest files.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from html import escape
from pathlib import Path

import _harness  # first: offline
import pypdf
from _harness import INGEST, MB, peak_rss_mb

import crag
from crag import Settings
from crag.app.render.browser import find_chromium, print_pdf
from crag.events import Source
from crag.index.store import ChunkIndex
from crag.ingestion.readers import read_documents
from crag.workflows.factory import build_workflow

for _name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TAVILY_API_KEY"):
    os.environ.pop(_name, None)  # offline: the extractive answer and the lexical grader

HEADER, FOOTER = "Lumen Field Manual, revision 3", "Confidential: Lumen Energy internal use only"
WORDS = [
    "the", "a", "of", "and", "to", "in", "is", "that", "for", "on", "with", "as", "by",
    "this", "from", "at", "which", "be", "are", "or", "an", "it", "system", "energy", "panel",
    "battery", "grid", "voltage", "output", "module", "cable", "roof", "site", "sensor",
    "data", "operator", "season", "morning", "heavy", "light", "north", "south", "quickly",
    "slowly", "measured", "recorded", "stored", "every", "each", "within", "under", "above",
    "between", "after", "before", "during", "service", "report", "installation",
    "maintenance", "weather", "cloud", "sunlight", "storage", "demand", "supply", "network",
    "technician", "customer", "contract", "schedule", "annual", "monthly", "careful",
    "reliable", "stable",
]
SYLLABLES = [
    "var", "nok", "tel", "quin", "dra", "mos", "pel", "rix", "zan", "fo", "lu", "ken", "gar",
    "sil", "tup", "bre", "hom", "jas",
]
# (fact, question) templates; {n} is an invented name, {v} a number, unique per fact.
TEMPLATES = [
    ("The {n} relay trips at {v} amperes.", "At how many amperes does the {n} relay trip?"),
    ("The {n} valve opens at {v} bar.", "At what pressure in bar does the {n} valve open?"),
    ("The {n} turbine was commissioned in {y}.", "In which year was the {n} turbine commissioned?"),
    ("Engineer {n} inspects the substation every {v} days.",
     "How often does engineer {n} inspect the substation?"),
    ("The {n} reservoir holds {v} million litres.", "How many litres does the {n} reservoir hold?"),
    ("The {n} ferry crosses the fjord in {v} minutes.", "How long does the {n} ferry take to cross the fjord?"),
    ("Professor {n} founded the glacier institute in {y}.", "When did professor {n} found the glacier institute?"),
    ("The {n} bridge spans {v} metres of river.", "How long is the {n} bridge?"),
    ("The {n} orchard yields {v} tonnes of pears.", "How many tonnes of pears does the {n} orchard yield?"),
    ("The {n} telescope weighs {v} kilograms.", "What does the {n} telescope weigh?"),
    ("Captain {n} sailed to Lisbon in {y}.", "In which year did captain {n} sail to Lisbon?"),
    ("The {n} library lends {v} thousand books a year.", "How many books does the {n} library lend?"),
]


@dataclass(frozen=True)
class Fact:
    file: str
    where: str | None  # the page label or slide number; None for a DOCX
    sentence: str
    question: str
    row: tuple[str, str, str] | None = None  # a table's fact: the row's key, the column and value asked


@dataclass
class Fixture:
    path: Path
    source: str  # the text a reader reads, in reading order
    facts: list[Fact]


def filler(rng: random.Random, words: int) -> str:
    """Seeded sentences of 8 to 16 words from WORDS, capitalised and full-stopped."""
    out: list[str] = []
    while sum(len(s.split()) for s in out) < words:
        sentence = rng.choices(WORDS, k=rng.randint(8, 16))
        out.append(" ".join(sentence).capitalize() + ".")
    return " ".join(out)


def make_fact(rng: random.Random, used: set[str], file: str, where: str | None) -> Fact:
    while (name := "".join(rng.sample(SYLLABLES, 2)).capitalize()) in used:
        pass
    used.add(name)
    fact, question = rng.choice(TEMPLATES)
    values = {"n": name, "v": rng.randint(11, 97), "y": rng.randint(1961, 2019)}
    return Fact(file, where, fact.format(**values), question.format(**values))


def sections(rng: random.Random, used: set[str], file: str, count: int,
             words: int = 90) -> tuple[list[list[str]], list[Fact]]:
    """`count` sections of three paragraphs, a fact at a random place in the middle one."""
    out, facts = [], []
    for number in range(1, count + 1):
        fact = make_fact(rng, used, file, str(number))
        middle = filler(rng, words).split(". ")
        middle.insert(rng.randint(1, len(middle) - 1), fact.sentence[:-1])
        out.append([filler(rng, words), ". ".join(middle), filler(rng, words)])
        facts.append(fact)
    return out, facts


def html(pages: list[list[str]], *, columns: int = 1, running: bool = False) -> str:
    style = ("@page { size: A4; margin: 2cm; } body { font: 11pt/1.4 serif; } .page { padding-top: 1cm; } "
             f".page {{ column-count: {columns}; column-gap: 1cm; }} .page + .page {{ page-break-before: always; }} "
             ".run { position: fixed; left: 0; right: 0; font-size: 9pt; text-align: center; } "
             ".top { top: 0; } .bottom { bottom: 0; }")
    margins = (f'<div class="run top">{HEADER}</div><div class="run bottom">{FOOTER}</div>'
               if running else "")
    body = "".join('<div class="page">' + "".join(f"<p>{escape(p)}</p>" for p in page) + "</div>"
                   for page in pages)
    return f"<!doctype html><html><head><style>{style}</style></head><body>{margins}{body}</body></html>"


def make_pdf(folder: Path, name: str, pages: list[list[str]], facts: list[Fact], **layout: object) -> Fixture:
    page = folder / f"{name}.html"
    page.write_text(html(pages, **layout), encoding="utf-8")  # type: ignore[arg-type]
    path = print_pdf(page, folder / f"{name}.pdf")
    page.unlink()
    # NFKC: Chromium draws "fi" as its ligature where the font has one (DejaVu does).
    raw = [" ".join(unicodedata.normalize("NFKC", p.extract_text() or "").split())
           for p in pypdf.PdfReader(path).pages]
    if len(raw) != len(pages) or any(f.sentence not in raw[int(f.where or 0) - 1] for f in facts):
        raise RuntimeError(f"{path}: a section overflowed its page; shorten the filler")
    if layout.get("running") and not all(HEADER in t and FOOTER in t for t in raw):
        raise RuntimeError(f"{path}: the running header or footer is missing from a page")
    return Fixture(path, "\n".join("\n".join(page) for page in pages), facts)


def make_docx(folder: Path, rng: random.Random, used: set[str]) -> Fixture:
    import docx

    pages, facts = sections(rng, used, "prose.docx", 8)
    facts = [Fact(f.file, None, f.sentence, f.question) for f in facts]
    document = docx.Document()
    for paragraph in (p for page in pages for p in page):
        document.add_paragraph(paragraph)
    document.save(folder / "prose.docx")
    return Fixture(folder / "prose.docx", "\n".join(p for page in pages for p in page), facts)


def make_pptx(folder: Path, rng: random.Random, used: set[str]) -> Fixture:
    import pptx
    from pptx.util import Cm

    pages, facts = sections(rng, used, "slides.pptx", 8, words=25)
    deck = pptx.Presentation()
    for page in pages:
        slide = deck.slides.add_slide(deck.slide_layouts[6])  # blank: no title placeholder
        frame = slide.shapes.add_textbox(Cm(1), Cm(1), Cm(23), Cm(17)).text_frame
        frame.text = page[0]
        for paragraph in page[1:]:
            frame.add_paragraph().text = paragraph
    deck.save(folder / "slides.pptx")
    return Fixture(folder / "slides.pptx", "\n".join(p for page in pages for p in page), facts)


PDFS = [("one", 8, {}), ("two", 8, {"columns": 2}), ("running", 8, {"running": True}), ("facts", 20, {})]


def build(folder: Path, seed: int = 23, pdfs: list[str] | None = None) -> list[Fixture]:
    """Every fixture; of the PDFs, only those named in `pdfs` when given (an empty list: none)."""
    rng, used = random.Random(seed), set()
    fixtures = []
    for name, count, layout in PDFS:
        pages, facts = sections(rng, used, f"{name}.pdf", count, words=140 if layout.get("columns") else 150)
        if pdfs is None or name in pdfs:
            fixtures.append(make_pdf(folder, name, pages, facts, **layout))
    fixtures += [make_docx(folder, rng, used), make_pptx(folder, rng, used)]
    if pdfs is None or "tables" in pdfs:
        fixtures.append(make_tables_pdf(folder, rng, used))
    else:  # make_tables_pdf's draws, so tables.docx is the same with or without the PDF
        for _ in tables(rng, used):
            filler(rng, 40)
    return [*fixtures, make_tables_docx(folder, rng, used)]


def long_pdf(folder: Path, pages: int, seed: int = 7) -> Path:
    """A `pages`-page one-column PDF of filler prose with a running header and footer."""
    if (folder / f"long-{pages}.pdf").exists():
        return folder / f"long-{pages}.pdf"
    rng = random.Random(seed)
    body = [[filler(rng, 150), filler(rng, 150), filler(rng, 150)] for _ in range(pages)]
    page = folder / f"long-{pages}.html"
    page.write_text(html(body, running=True), encoding="utf-8")
    return print_pdf(page, folder / f"long-{pages}.pdf", timeout=600)


ROLES = ["Technician", "Operator", "Engineer", "Inspector", "Surveyor", "Electrician"]
TOWNS = ["Ostrava", "Brno", "Lisbon", "Tromso", "Graz", "Lyon", "Porto", "Aarhus", "Bergen", "Turku"]


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    asked: list[tuple[int, int]]  # (row, column) of each question
    wide: bool = False


def tables(rng: random.Random, used: set[str]) -> list[Table]:
    """Four shapes: numbers, text cells that wrap, 50 rows (two pages), nine narrow columns."""
    def name() -> str:
        while (key := "".join(rng.sample(SYLLABLES, 2)).capitalize()) in used:
            pass
        used.add(key)
        return key

    def ask(rows: list[int], columns: list[int]) -> list[tuple[int, int]]:
        return [(row, rng.choice(columns)) for row in rows]

    stations = [[name(), f"{rng.randint(20, 990) / 10:g}", str(rng.randint(5, 60)), str(rng.randint(11, 450)),
                 str(rng.randint(1961, 2019))] for _ in range(10)]
    staff = [[name(), rng.choice(ROLES), rng.choice(TOWNS), filler(rng, rng.randint(10, 24))] for _ in range(8)]
    meters = [[name(), rng.choice(TOWNS), str(rng.randint(1000, 99999)),
               f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"] for _ in range(50)]
    turbines = [[name(), *(str(rng.randint(lo, hi)) for lo, hi in
                           [(60, 160), (80, 240), (900, 15000), (2, 4), (20, 34), (120, 900), (2, 3), (1995, 2025)])]
                for _ in range(8)]
    return [
        Table("Pump stations", ["Station", "Flow (l/s)", "Head (m)", "Power (kW)", "Commissioned"],
              stations, ask([0, 3, 6, 9], [1, 2, 3, 4])),
        Table("Field staff", ["Name", "Role", "Base", "Duty"], staff, ask([1, 3, 5, 7], [1, 2])),
        Table("Meter readings", ["Meter", "Site", "Reading (kWh)", "Reading date"], meters,
              ask([2, 11, 23, 31, 40, 48], [1, 2, 3])),
        Table("Turbines", ["Turbine", "Hub (m)", "Rotor (m)", "Rated (kW)", "Cut-in (m/s)", "Cut-out (m/s)",
                           "Mass (t)", "Blades", "Year"], turbines, ask([0, 2, 5, 7], list(range(1, 9))), wide=True),
    ]


def table_facts(table: Table, file: str, pages: list[str] | None) -> list[Fact]:
    """A question "what is the <column> of <row>?" per asked cell; `pages` the PDF's raw text."""
    facts = []
    for row, column in table.asked:
        key, value = table.rows[row][0], table.rows[row][column]
        where = None if pages is None else next(str(n) for n, text in enumerate(pages, 1) if key in text)
        question = f"What is the {table.header[column].lower()} of {key}?"
        facts.append(Fact(file, where, f"{key} {value}.", question, (key, table.header[column], value)))
    return facts


def make_tables_pdf(folder: Path, rng: random.Random, used: set[str]) -> Fixture:
    """Tables as Chromium prints HTML tables (ruled cells, the header row in <thead>, which
    Chromium repeats on the next page), each under a heading and a paragraph."""
    style = ("@page { size: A4; margin: 2cm; } body { font: 11pt/1.4 serif; } table { border-collapse: collapse; } "
             "th, td { border: 1px solid #888; padding: 2px 6px; } .wide { font-size: 8pt; }")
    parts, shapes = [], tables(rng, used)
    for table in shapes:
        head = "".join(f"<th>{escape(cell)}</th>" for cell in table.header)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in table.rows)
        parts.append(f"<h2>{table.title}</h2><p>{filler(rng, 40)}</p><table class=\"{'wide' if table.wide else ''}\">"
                     f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    page = folder / "tables.html"
    page.write_text(f"<!doctype html><html><head><style>{style}</style></head><body>{''.join(parts)}</body></html>",
                    encoding="utf-8")
    path = print_pdf(page, folder / "tables.pdf")
    page.unlink()
    raw = [unicodedata.normalize("NFKC", p.extract_text() or "") for p in pypdf.PdfReader(path).pages]
    facts = [fact for table in shapes for fact in table_facts(table, "tables.pdf", raw)]
    meters = [fact.where for fact in facts if fact.row and fact.row[0] in {r[0] for r in shapes[2].rows}]
    if len(set(meters)) < 2:
        raise RuntimeError(f"{path}: the 50-row table does not span two pages")
    return Fixture(path, "", facts)


def make_tables_docx(folder: Path, rng: random.Random, used: set[str]) -> Fixture:
    """The same shapes, other names, as python-docx writes Word tables (style Table Grid)."""
    import docx

    document, shapes = docx.Document(), tables(rng, used)
    for table in shapes:
        document.add_heading(table.title, level=2)
        document.add_paragraph(filler(rng, 40))
        grid = document.add_table(rows=0, cols=len(table.header), style="Table Grid")
        for row in [table.header, *table.rows]:
            for cell, text in zip(grid.add_row().cells, row, strict=True):
                cell.text = text
    document.save(folder / "tables.docx")
    facts = [fact for table in shapes for fact in table_facts(table, "tables.docx", None)]
    return Fixture(folder / "tables.docx", "", facts)


# --- measurements ---------------------------------------------------------------------------


def crag_text(path: Path) -> str:
    return "\n".join(d.text for d in read_documents(path))


def llama_text(path: Path) -> str:
    from llama_index.core import SimpleDirectoryReader

    return "\n".join(d.text for d in SimpleDirectoryReader(input_files=[str(path)]).load_data())


def fidelity(source: str, extracted: str) -> float:
    return SequenceMatcher(None, source.split(), extracted.split(), autojunk=False).ratio()


@dataclass
class Citations:
    first_right: int = 0  # the first source names the fact's file and page
    held: int = 0  # some source's text holds the fact sentence
    held_right: int = 0  # ... and that source names the fact's file and page
    quoted: int = 0  # the answer holds the fact (a table's: the row's key and value on one line)
    headed: int = 0  # a table's fact: the first source's chunk holds the row and the column's name
    count: int = 0
    misses: list[str] = field(default_factory=list)


def citations(fixtures: list[Fixture], folder: Path, kinds: dict[str, list[str]]) -> dict[str, Citations]:
    """Each fact's question asked of one index holding every fixture; returns the counts for
    each kind of fact, `kinds` naming the files whose facts each kind holds."""
    index = folder / "index"
    crag.ingest([f.path for f in fixtures], index)
    (folder / "crag.toml").write_text("")  # the defaults, whatever crag.toml the current folder has
    settings = Settings.load(config_file=folder / "crag.toml", env={},
                             index={"path": index}, web_search={"kind": "none"})
    workflow = build_workflow(settings)
    chunks = {node.node_id: node.get_content() for node in ChunkIndex.load(index).nodes}
    out = {kind: Citations() for kind in kinds}
    for f in fixtures:
        for fact in f.facts:
            kind = next(kind for kind, files in kinds.items() if f.path.name in files)
            _ask(workflow, fact, out[kind], chunks)
    return out


def _ask(workflow: object, fact: Fact, out: Citations, chunks: dict[str, str]) -> None:
    result = workflow.ask(fact.question)  # type: ignore[attr-defined]
    sources = result.sources
    out.count += 1
    out.quoted += _holds(result.answer, fact)
    chunk = chunks.get(sources[0].id, "") if sources else ""
    out.headed += bool(fact.row) and _holds(chunk, fact) and fact.row[1] in chunk  # type: ignore[index]
    if sources and _names(sources[0], fact):
        out.first_right += 1
    else:
        got = f"{sources[0].file} {_where(sources[0])}" if sources else "no source"
        out.misses.append(f"{fact.file} {fact.where}: {fact.question} -> {got}")
    holding = [s for s in sources if _holds(s.text, fact)]
    out.held += bool(holding)
    out.held_right += bool(holding) and _names(holding[0], fact)


def _holds(text: str, fact: Fact) -> bool:
    """The fact sentence is in the text; a table's fact: a line holds the row's key and value."""
    if fact.row is None:
        return fact.sentence[:-1] in text
    key, _, value = fact.row
    return any(key in cells and value in cells
               for cells in (re.split(r"[\s|]+", line) for line in text.splitlines()))


def _where(source: Source) -> str | None:
    return source.page or (str(source.slide) if source.slide else None)


def _names(source: Source, fact: Fact) -> bool:
    return source.file == fact.file and (fact.where is None or _where(source) == fact.where)


def pages_per_second(path: Path, read: object, runs: int) -> float:
    count = len(pypdf.PdfReader(path).pages)
    read(path)  # type: ignore[operator]  # warm: imports and the page cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        read(path)  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return count / statistics.median(times)


_READ = ("import sys; from pathlib import Path; from crag.ingestion.readers import read_documents; "
         "sum(len(d.text) for d in read_documents(Path(sys.argv[1])))")


# --- the report -----------------------------------------------------------------------------


def main() -> None:
    cli = _harness.parser(__doc__)
    cli.add_argument("--pages", type=int, default=200, help="pages of the PDF read for pages/s")
    cli.add_argument("--big-pages", type=int, default=1000, help="pages of the PDF ingested for peak RSS")
    cli.add_argument("--runs", type=int, default=3)
    cli.add_argument("--keep", type=Path, help="build the fixtures here and keep them")
    cli.add_argument("--real", action="store_true",
                     help="measure the real-world set (benchmarks/real_documents) instead")
    args = _harness.parse(cli, smoke={"pages": 2, "big_pages": 2, "runs": 1})
    with _harness.measured(__file__, args) as run, tempfile.TemporaryDirectory(prefix="crag-docbench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        if args.real or args.smoke:
            import _documents_real

            _documents_real.report(folder, args.runs, run)
        if not args.real:
            report(folder, args, run)


def report(folder: Path, args: argparse.Namespace, run: _harness.Run) -> None:
    pdfs = None
    if find_chromium() is None:
        pdfs = []
        run.skip("the PDF fixtures, pages/s and peak RSS", "no Chromium to print them (apt-get install chromium)")
    elif args.smoke:
        pdfs = ["one", "tables"]
    fixtures = build(folder, pdfs=pdfs)
    print("| file | crag fidelity | SimpleDirectoryReader fidelity | target |")
    print("|---|---|---|---|")
    targets = {"one.pdf": 0.98, "two.pdf": 0.95, "prose.docx": 0.98}
    for f in (f for f in fixtures if f.source):  # the tables' questions measure them
        ours, theirs = fidelity(f.source, crag_text(f.path)), fidelity(f.source, llama_text(f.path))
        target = f"≥ {targets[f.path.name]}" if f.path.name in targets else ""
        print(f"| {f.path.name} | {ours:.3f} | {theirs:.3f} | {target} |")
        run.figures[f"fidelity {f.path.name}"] = {"crag": ours, "SimpleDirectoryReader": theirs}
        if f.path.name in targets:
            run.goal(f"fidelity of {f.path.name}", ours, at_least=targets[f.path.name])

    tables = [t for t in ("tables.pdf", "tables.docx") if any(f.path.name == t for f in fixtures)]
    kinds = {"prose": [f.path.name for f in fixtures if f.path.name not in tables], **{t: [t] for t in tables}}
    cited = citations(fixtures, folder, kinds)
    print("\n| table questions (crag): what is the <column> of <row>? | "
          + " | ".join(f"{t}, {cited[t].count}" for t in tables) + " |\n|---|" + "---|" * len(tables))
    for label, name in [("first source names the file and page", "first_right"),
                        ("a cited source holds the row (its key and the value on one line)", "held"),
                        ("the first source's chunk holds the row and the column's name", "headed"),
                        ("the answer holds the row", "quoted")]:
        print(f"| {label} | " + " | ".join(f"{getattr(cited[t], name) / cited[t].count:.3f}" for t in tables) + " |")
    for t in tables:
        for miss in cited[t].misses:
            print(f"  miss: {miss}")
        run.figures[f"{t} questions, first source right"] = cited[t].first_right / cited[t].count
    prose = cited["prose"]
    count = prose.count
    print(f"\n| citations (crag), {count} facts | share |\n|---|---|")
    print(f"| first source names the fact's file and page (target ≥ 0.98) | {prose.first_right / count:.3f} |")
    print(f"| a cited source holds the fact sentence | {prose.held / count:.3f} |")
    print(f"| ... and names its file and page | {prose.held_right / max(prose.held, 1):.3f} |")
    for miss in prose.misses:
        print(f"  miss: {miss}")
    run.goal("citations: first source names the fact's file and page", prose.first_right / count, at_least=0.98)
    if pdfs == []:
        return

    long = long_pdf(folder, args.pages)
    ours, theirs = pages_per_second(long, crag_text, args.runs), pages_per_second(long, llama_text, args.runs)
    print(f"\n| reading a {args.pages}-page PDF | pages/s |\n|---|---|")
    print(f"| crag (read_documents) | {ours:.0f} |\n| SimpleDirectoryReader | {theirs:.0f} |")

    big = long_pdf(folder, args.big_pages)
    read = peak_rss_mb(_READ, str(big))
    ingest = peak_rss_mb(INGEST, str(big), "--index", str(folder / "big-index"))
    print(f"\n| {args.big_pages}-page PDF ({big.stat().st_size / MB:.1f} MB) | peak RSS MB |\n|---|---|")
    print(f"| crag: read only | {read:.0f} |\n| crag ingest (target ≤ 300) | {ingest:.0f} |")
    run.figures.update({"pages_per_second": {"crag": ours, "SimpleDirectoryReader": theirs},
                        "peak_rss_mb": {"read only": read, "crag ingest": ingest}})
    run.goal(f"peak RSS of crag ingest of a {args.big_pages}-page PDF, MB", ingest, at_most=300)

if __name__ == "__main__":
    main()
