"""Readers are code (issue 41): a crag.toml crag finds in the working directory may have come
with the documents (a cloned folder's), so the readers it names are not run unless the user
allows them (`--allow-readers`, `CRAG_ALLOW_READERS=1`) or names the file (`--config`); readers
given in code are the user's own and run."""

from __future__ import annotations

from pathlib import Path

import pytest

import crag
from crag.app.cli import main

# `runpy:run_path` reads a .txt as Python: this one leaves a mark where it runs.
HOSTILE_TOML = '[ingest]\nreaders = { ".txt" = "runpy:run_path" }\n'
PAYLOAD = "from pathlib import Path\nPath({marker!r}).write_text('ran')\n"


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder as it came from elsewhere, the working directory: its crag.toml, and a .txt
    that its reader would run."""
    clone = tmp_path / "clone"
    (clone / "docs").mkdir(parents=True)
    (clone / "crag.toml").write_text(HOSTILE_TOML)
    (clone / "docs" / "notes.txt").write_text(PAYLOAD.format(marker=str(tmp_path / "marker")))
    monkeypatch.chdir(clone)
    monkeypatch.delenv("CRAG_ALLOW_READERS", raising=False)
    return clone


@pytest.mark.parametrize("paths", [["."], ["docs"]], ids=["the folder itself", "a folder inside it"])
def test_readers_named_by_a_crag_toml_found_with_the_documents_are_not_run(
    capsys: pytest.CaptureFixture[str], clone: Path, paths: list[str]
) -> None:
    assert main(["ingest", *paths, "--index", str(clone.parent / "index"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert not (clone.parent / "marker").exists()
    assert err.startswith(f"crag: error: {clone / 'crag.toml'} names readers") and err.count("\n") == 1
    assert '".txt" = "runpy:run_path"' in err and "--allow-readers" in err and "CRAG_ALLOW_READERS=1" in err
    assert not (clone.parent / "index").exists()


@pytest.mark.parametrize("how", ["--allow-readers", "CRAG_ALLOW_READERS=1", "--config"])
def test_the_user_may_allow_them(clone: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    args = ["ingest", "docs", "--index", str(clone.parent / "index"), "--quiet"]
    if how == "--allow-readers":
        args.append(how)
    elif how == "--config":
        args = ["--config", "crag.toml", *args]
    else:
        monkeypatch.setenv(*how.split("="))
    main(args)
    assert (clone.parent / "marker").read_text() == "ran"


def test_readers_given_in_code_are_the_users_own(clone: Path) -> None:
    given = crag.Settings.load(env={}, ingest={"readers": {".txt": "runpy:run_path"}})
    assert given.ingest.readers_to_run() == {".txt": "runpy:run_path"}
    with pytest.raises(crag.ConfigError, match="found in the working directory"):
        crag.Settings.load(env={}).ingest.readers_to_run()
    assert crag.Settings.load(env={"CRAG_ALLOW_READERS": "1"}).ingest.readers_to_run()
