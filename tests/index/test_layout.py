"""The index folder's own names: what else crag keeps in it survives every ingest."""

from __future__ import annotations

from pathlib import Path

from crag import ingest

# What the server, the keys command and the grade cache keep in an index folder, beside its versions.
NEIGHBOURS = ("collections/hr/CURRENT", "server.db", "server.db-wal", "server.db-shm", "server.db-journal",
              "keys.json", "keys.json.lock", ".keys.json.tmp-3f9a", "grades.sqlite", "grades.sqlite-wal")


def test_an_ingest_writes_beside_crags_other_files_and_never_removes_them(tmp_path: Path) -> None:
    index = tmp_path / "index"
    for name in NEIGHBOURS:  # a server and its keys set up before the first ingest
        (index / name).parent.mkdir(parents=True, exist_ok=True)
        (index / name).write_text("kept", encoding="utf-8")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "tea.txt").write_text("Green tea is steeped at 80 degrees.", encoding="utf-8")

    ingest([docs], index)  # not "a folder of other things"
    for text in ("Black tea is steeped at 95 degrees.", "White tea is steeped at 75 degrees."):
        (docs / "tea.txt").write_text(text, encoding="utf-8")
        ingest([docs], index)  # a new version: older ones pruned, nothing else

    assert {n: (index / n).read_text(encoding="utf-8") for n in NEIGHBOURS} == dict.fromkeys(NEIGHBOURS, "kept")
    assert not (index / "v1").exists()  # pruning ran
