"""No file stops a folder (issue 40): whatever fails inside one file's reader, in the reader's
child process or in the ingest's own (a user's reader, no child to be had, documents that
cannot be sent back), that file is left out with a line naming it and the next one is read."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion import readers
from crag.ingestion.files import ReadLimits
from crag.ingestion.worker import FileReader


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "bad.txt").write_text("anything", encoding="utf-8")
    (tmp_path / "good.md").write_text("The lamp runs for ten hours.", encoding="utf-8")
    return tmp_path


def broken(path: Path, data: bytes) -> list[Document]:
    raise ZeroDivisionError("division by zero")


def unsendable(path: Path, data: bytes) -> list[Document]:
    """A document that cannot be pickled back to the ingest: of a class pickle cannot name."""

    class Local(Document):
        pass

    return [Local(text="Fine text.")]


def test_a_users_reader_that_fails_leaves_out_its_file_with_a_line(folder: Path) -> None:
    with FileReader(readers={".txt": broken}) as reader:
        with pytest.raises(IngestError, match=r"bad.txt: its reader failed \(ZeroDivisionError: division by zero\)"):
            reader.read(folder / "bad.txt")
        documents, _ = reader.read(folder / "good.md")
    assert [d.text for d in documents] == ["The lamp runs for ten hours."]


def test_without_a_child_a_failing_reader_leaves_out_its_file_with_a_line(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(readers.READERS, ".txt", broken)
    monkeypatch.setattr(FileReader, "_started", lambda self: None)  # as inside a Pool's worker
    with FileReader() as reader:
        with pytest.raises(IngestError, match=r"bad.txt: its reader failed \(ZeroDivisionError"):
            reader.read(folder / "bad.txt")
        documents, _ = reader.read(folder / "good.md")
    assert [d.text for d in documents] == ["The lamp runs for ten hours."]


def test_documents_the_child_cannot_send_back_leave_out_that_file_and_the_child_reads_on(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(readers.READERS, ".txt", unsendable)  # the forked child inherits it
    with FileReader(ReadLimits(max_seconds=60)) as reader:
        with pytest.raises(IngestError, match=r"bad.txt: its reader failed \((Pickling|Attribute)Error"):
            reader.read(folder / "bad.txt")
        child = reader._child
        documents, _ = reader.read(folder / "good.md")
        assert reader._child is child  # the same child: nothing went wrong with it
    assert [d.text for d in documents] == ["The lamp runs for ten hours."]
