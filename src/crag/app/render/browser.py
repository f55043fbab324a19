"""Open a page in headless Chromium with the network off: its DOM and a screenshot, or a PDF.

Used by the browser test (the pictures really render, offline), by `docs/make_screenshots.py`
(the README's picture), and to print the PDFs that the document tests and
`benchmarks/documents.py` read. Debian: `apt-get install chromium`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """`$CRAG_CHROMIUM` if set, else the first Chromium on PATH; None if there is none."""
    named = os.environ.get("CRAG_CHROMIUM")
    if named:
        return shutil.which(named)
    return next((path for name in CANDIDATES if (path := shutil.which(name))), None)


@dataclass
class Rendered:
    dom: str  # the document as the browser built it
    screenshot: Path  # a PNG of the window


def render(page: Path, screenshot: Path, *, width: int = 1280, height: int = 1400,
           chromium: str | None = None, timeout: float = 60) -> Rendered:
    """Load `page` once in headless Chromium, offline, and keep its DOM and a screenshot."""
    done = _run(["--hide-scrollbars", "--force-device-scale-factor=1", f"--window-size={width},{height}",
                 "--dump-dom", f"--screenshot={screenshot.resolve()}", page.resolve().as_uri()],
                chromium, timeout)
    if done.returncode != 0 or not screenshot.exists():
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}")
    return Rendered(dom=done.stdout, screenshot=screenshot)


def print_pdf(page: Path, pdf: Path, *, chromium: str | None = None, timeout: float = 300) -> Path:
    """Print `page` (HTML) to `pdf` as Chromium's "Save as PDF" does, without the date, title
    and URL it would otherwise stamp on every page; returns `pdf`."""
    done = _run(["--no-pdf-header-footer", f"--print-to-pdf={pdf.resolve()}", page.resolve().as_uri()],
                chromium, timeout)
    if done.returncode != 0 or not pdf.exists():
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}")
    return pdf


def _run(args: list[str], chromium: str | None, timeout: float) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with `args`, offline: every request goes to a dead proxy, every host
    name fails to resolve, and background services (updates, sync) are disabled."""
    exe = chromium or find_chromium()
    if exe is None:
        raise FileNotFoundError("no Chromium found (install Debian's chromium package)")
    with tempfile.TemporaryDirectory(prefix="crag-chromium-") as profile:
        return subprocess.run(
            [
                exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--no-first-run", "--disable-component-update",
                "--disable-sync", "--disable-extensions", f"--user-data-dir={profile}",
                "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND", *args,
            ],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
