"""Documents printed by a browser, checked (issue 33): ligatures read as typed, tables kept as
tables. Skipped only where no Chromium exists; `.ci/run` installs Debian's `chromium`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.marks import BROWSER

from crag.app.cli import main
from crag.app.render.browser import print_pdf

pytestmark = [*BROWSER, pytest.mark.usefixtures("no_config_file")]


def ask(capsys: pytest.CaptureFixture[str], index: Path, question: str) -> dict:
    assert main(["ask", question, "--index", str(index), "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("font", ["DejaVu Serif", "Liberation Serif"])
def test_a_pdf_with_ligatures_answers_a_question_typed_without_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, font: str
) -> None:
    """Liberation has no "ff" or "ffi" glyph: Chromium sets each in a fallback font, a run of its
    own, which pypdf reads as "o ﬃ cial" (issue 40). DejaVu has them all."""
    import pypdf

    page = tmp_path / "coast.html"
    page.write_text(f"<!doctype html><html><body style=\"font-family: '{font}'\"><p>The oﬃcial Hausdorﬀ "
                    "dimension of the Norwegian coastline is 1.52, measured by the eﬀort of many "
                    "surveys.</p></body></html>", encoding="utf-8")
    folder = tmp_path / "docs"
    folder.mkdir()
    print_pdf(page, folder / "coast.pdf")
    printed = pypdf.PdfReader(folder / "coast.pdf").pages[0]
    fonts = [str(f.get_object()["/BaseFont"]) for f in printed["/Resources"]["/Font"].values()]
    if not any(font.replace(" ", "") in name for name in fonts):
        pytest.skip(f"no {font} font: install Debian's fonts-liberation and fonts-dejavu-core, as .ci/run does")
    assert "ﬀ" in printed.extract_text()  # as the PDF holds it
    assert main(["ingest", str(folder), "--index", str(tmp_path / "index"), "--quiet"]) == 0
    capsys.readouterr()

    result = ask(capsys, tmp_path / "index", "What is the official Hausdorff dimension of the coastline?")
    assert result["verdict"] == "correct"
    assert "The official Hausdorff dimension of the Norwegian coastline is 1.52" in result["answer"]
    assert not any("\ufb00" <= c <= "\ufb06" for c in json.dumps(result, ensure_ascii=False))
