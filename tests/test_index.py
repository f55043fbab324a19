"""Ingest: readers, incremental re-ingest, atomic writes, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from crag import ChunkIndex, IndexNotFoundError, IngestError, ingest
from crag.models import WordLlamaEmbedding


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.txt").write_text("Tea was first drunk in China. Green tea is not oxidised.")
    (folder / "guide.md").write_text("# Brewing\n\nSteep green tea at 80 degrees for two minutes.")
    (folder / "page.html").write_text(
        "<html><head><title>Oolong</title><script>var x = 1;</script></head>"
        "<body><p>Oolong is partly oxidised.</p></body></html>"
    )
    (folder / "corpus.jsonl").write_text(
        json.dumps({"doc_id": "darjeeling", "title": "Darjeeling", "text": "Darjeeling tea grows in India."}) + "\n"
    )
    (folder / "ignored.pdf").write_bytes(b"%PDF-1.4")
    return folder


class CountingEmbedding(WordLlamaEmbedding):
    """The real model, counting the texts it embeds."""

    def embed_many(self, texts: list[str]) -> np.ndarray:
        self.__dict__.setdefault("count", 0)
        self.__dict__["count"] += len(texts)
        return super().embed_many(texts)


def test_ingest_reads_every_supported_type(docs: Path, tmp_path: Path) -> None:
    report = ingest([docs], tmp_path / "index")
    index = ChunkIndex.load(tmp_path / "index")
    assert report.files_read == 4 and report.documents == 4
    texts = " ".join(n.get_content() for n in index.nodes)
    assert "Oolong is partly oxidised." in texts and "var x" not in texts
    by_doc = {n.metadata["doc_id"]: n.metadata["title"] for n in index.nodes}
    assert by_doc["darjeeling"] == "Darjeeling"
    assert "Oolong" in by_doc.values()
    assert index.embeddings.shape == (len(index.nodes), 256)


def test_reingesting_unchanged_files_does_no_work(docs: Path, tmp_path: Path) -> None:
    ingest([docs], tmp_path / "index")
    before = (tmp_path / "index" / "nodes.jsonl").stat().st_mtime_ns
    model = CountingEmbedding()
    report = ingest([docs], tmp_path / "index", embed_model=model)
    assert (report.files_read, report.files_unchanged, report.chunks_added) == (0, 4, 0)
    assert model.__dict__.get("count", 0) == 0
    assert (tmp_path / "index" / "nodes.jsonl").stat().st_mtime_ns == before


def test_a_changed_file_replaces_only_its_own_chunks(docs: Path, tmp_path: Path) -> None:
    ingest([docs], tmp_path / "index")
    (docs / "notes.txt").write_text("Tea reached Europe in the 17th century.")
    model = CountingEmbedding()
    report = ingest([docs], tmp_path / "index", embed_model=model)
    index = ChunkIndex.load(tmp_path / "index")
    texts = [n.get_content() for n in index.nodes]
    assert report.files_read == 1 and model.__dict__["count"] == 1
    assert any("17th century" in t for t in texts)
    assert not any("first drunk in China" in t for t in texts)
    assert len(index) == 4


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("latin1.txt", "caf\xe9".encode("latin-1"), "not UTF-8"),
        ("binary.txt", b"\x00\x01\x02binary", "binary"),
        ("broken.jsonl", b'{"doc_id": "a", "text": "ok"}\n{not json\n', "broken.jsonl:2"),
    ],
)
def test_an_unreadable_file_is_a_clear_error_and_the_old_index_survives(
    docs: Path, tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    ingest([docs], tmp_path / "index")
    before = ChunkIndex.load(tmp_path / "index")
    (docs / name).write_bytes(content)
    with pytest.raises(IngestError, match=message):
        ingest([docs], tmp_path / "index")
    after = ChunkIndex.load(tmp_path / "index")
    assert [n.node_id for n in after.nodes] == [n.node_id for n in before.nodes]


def test_a_crash_while_writing_leaves_the_previous_index_usable(
    docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest([docs], tmp_path / "index")
    before = len(ChunkIndex.load(tmp_path / "index"))
    (docs / "more.txt").write_text("Matcha is powdered green tea.")

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "save", disk_full)
    with pytest.raises(OSError):
        ingest([docs], tmp_path / "index")
    monkeypatch.undo()
    assert len(ChunkIndex.load(tmp_path / "index")) == before


def test_an_interrupted_swap_is_recovered_on_load(docs: Path, tmp_path: Path) -> None:
    ingest([docs], tmp_path / "index")
    (tmp_path / "index").rename(tmp_path / ".index.old")  # crashed between the two renames
    assert len(ChunkIndex.load(tmp_path / "index")) == 4


def test_a_missing_index_says_how_to_build_one(tmp_path: Path) -> None:
    with pytest.raises(IndexNotFoundError, match="crag ingest"):
        ChunkIndex.load(tmp_path / "nowhere")


def test_missing_paths_and_empty_folders_are_errors(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="does not exist"):
        ingest([tmp_path / "nope"], tmp_path / "index")
    (tmp_path / "empty").mkdir()
    with pytest.raises(IngestError, match="No .txt"):
        ingest([tmp_path / "empty"], tmp_path / "index")
