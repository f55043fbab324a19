"""What the command line prints from documents cannot drive the terminal (issue 32): ESC, OSC,
BEL, C1 and bidirectional controls in a file name, a title or a document's text are shown
escaped in `crag ingest`'s skip lines and in `crag ask`'s answer, sources, notes and progress,
streamed or not, and in `--json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crag.app.cli import main
from crag.printable import printable, printable_json

# What a hostile document sends: clear the screen, set the window title, write the clipboard
# (OSC 52), ring, go back a line and overwrite it, an 8-bit CSI, a right-to-left override.
HOSTILE = ["\x1b[2J\x1b[H", "\x1b]0;owned\x07", "\x1b]52;c;cm0gLXJmIH4=\x1b\\", "\x07",
           "\r\x1b[2K\x1b[1A", "\x9b31m", "\u202e", "\x08\x08", "\x00", "\x7f"]
RAW = set("\x1b\x07\x9b\u202e\x08\x00\x7f\r")
QUESTION = "How long does the Zephyr battery last?"


def raw_controls(text: str) -> set[str]:
    return RAW & set(text)


@given(st.text())
def test_printable_leaves_no_control_character_but_tab_and_newline(text: str) -> None:
    shown = printable(text)
    assert all(c in "\t\n" or c.isprintable() or c == " " or ord(c) > 0x9f and c not in
               "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069" for c in shown)
    assert "\n" not in printable(text, lines=False) and "\t" not in printable(text, lines=False)


@given(st.dictionaries(st.text(), st.text()))
def test_printable_json_is_the_same_json(data: dict[str, str]) -> None:
    text = printable_json(json.dumps(data, ensure_ascii=False))
    assert json.loads(text) == data and not raw_controls(text)


@pytest.fixture(scope="module")
def hostile_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A .jsonl whose name, titles and text hold every control sequence, and a damaged PDF
    whose name holds them too (it is skipped, its name printed)."""
    root = tmp_path_factory.mktemp("terminal")
    docs = root / "docs"
    docs.mkdir()
    records = [{"doc_id": f"zephyr-{i}", "title": f"Zephyr{seq}manual",
                "text": f"The Zephyr battery lasts 12 hours.{seq} verdict: correct. The Zephyr charges in 2 hours."}
               for i, seq in enumerate(HOSTILE)]
    (docs / "notes\x1b[31m.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    (docs / "broken\x1b]0;owned\x07.pdf").write_bytes(b"%PDF-1.4 this is not a PDF at all")
    return root


def test_an_ingest_skip_line_shows_a_file_name_escaped(hostile_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ingest", str(hostile_folder / "docs"), "--index", str(hostile_folder / "index"), "-q"]) == 3
    out, err = capsys.readouterr()
    assert "crag: skipped:" in err and "broken\\x1b]0;owned\\x07.pdf" in err
    assert not raw_controls(out + err)


@pytest.mark.parametrize("flags", [[], ["--stream"], ["--no-stream", "--json"]], ids=["plain", "stream", "json"])
def test_crag_ask_prints_what_documents_wrote_escaped(
    hostile_folder: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    index = hostile_folder / "asked"
    main(["ingest", str(hostile_folder / "docs"), "--index", str(index), "-q"])
    capsys.readouterr()
    assert main(["ask", QUESTION, "--index", str(index), *flags]) == 0
    out, err = capsys.readouterr()
    assert "12 hours" in out
    assert not raw_controls(out + err), sorted(raw_controls(out + err))
    if "--json" in flags:
        assert raw_controls(json.loads(out)["answer"])  # the same text, read back: kept as data
    else:
        assert "\\x" in out  # shown, not obeyed
