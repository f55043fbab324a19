"""Every file of a folder is counted (issue 40): a file of a type crag does not read is named in
a line, one per type, among the ingest's skipped lines; an .xlsx went by with no line while
progress said "read 34/34" of 35 files. Hidden files and folders (.git) stay quiet."""

from __future__ import annotations

from pathlib import Path

import pytest

from crag.app.cli import main
from crag.ingestion.readers import KINDS, gather_files


@pytest.fixture
def drive(tmp_path: Path) -> Path:
    """A shared drive's folder: a note crag reads, two archives, a README with no suffix, and
    hidden things (a repository's objects, a Finder file)."""
    drive = tmp_path / "drive"
    (drive / "2024").mkdir(parents=True)
    (drive / "notes.md").write_text("The lamp runs for ten hours.", encoding="utf-8")
    (drive / "backup.zip").write_bytes(b"PK\x05\x06" + bytes(18))
    (drive / "2024" / "Photos.ZIP").write_bytes(b"PK\x05\x06" + bytes(18))
    (drive / "README").write_text("See notes.md", encoding="utf-8")
    (drive / ".git" / "objects").mkdir(parents=True)
    (drive / ".git" / "objects" / "ab12").write_bytes(b"x")
    (drive / ".DS_Store").write_bytes(b"x")
    return drive


def test_each_type_crag_does_not_read_gets_one_line_naming_a_file_and_the_count(drive: Path) -> None:
    found, passed, not_read = gather_files([drive])
    assert found == [drive / "notes.md"] and passed == []
    assert not_read == [
        (f"{drive / '2024' / 'Photos.ZIP'} and 1 more .zip file: not read; crag reads {KINDS} "
         "(ingest.readers adds a type)."),
        f"{drive / 'README'}: not read; crag reads {KINDS} (ingest.readers adds a type).",
    ]


def test_a_type_a_users_reader_adds_is_found_not_reported(drive: Path) -> None:
    found, _, not_read = gather_files([drive], extra=(".zip",))
    assert [p.name for p in found] == ["Photos.ZIP", "backup.zip", "notes.md"]
    assert [line.split(":")[0] for line in not_read] == [str(drive / "README")]


def test_crag_ingest_says_which_files_it_did_not_read_and_is_not_failed_by_them(
    drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no crag.toml of the checkout's
    # A shared drive always holds files crag was never meant to read: each type is said, and
    # the ingest still succeeds (exit 0, not partial), or every nightly ingest would "fail".
    assert main(["ingest", str(drive), "--index", str(tmp_path / "index"), "-q"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        (f"crag: {drive / '2024' / 'Photos.ZIP'} and 1 more .zip file: not read; crag reads {KINDS} "
         "(ingest.readers adds a type)."),
        f"crag: {drive / 'README'}: not read; crag reads {KINDS} (ingest.readers adds a type).",
    ]
    assert captured.out.startswith("1 file(s) read, 0 unchanged, 1 chunk(s) added")


def test_without_the_ocr_extra_a_folders_images_get_a_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crag.ingestion import readers
    from crag.ingestion.formats.ocr import IMAGE_SUFFIXES, INSTALL

    monkeypatch.setattr(readers, "SUPPORTED", tuple(s for s in readers.SUPPORTED if s not in IMAGE_SUFFIXES))
    for name in ("scan-1.png", "scan-2.png", "notes.md"):
        (tmp_path / name).write_bytes(b"x")
    [line] = gather_files([tmp_path])[2]
    assert line == (f"{tmp_path / 'scan-1.png'} and 1 more .png file: not read; the text in images needs the "
                    f"ocr extra ({INSTALL}).")
