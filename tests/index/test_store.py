"""Ingest: readers, incremental re-ingest, atomic writes, clear errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from crag import ChunkIndex, IndexNotFoundError, IngestError, Settings, build_workflow, ingest
from crag.index.store import NodeFile, writer_lock
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
    (folder / "ignored.xyz").write_bytes(b"PK\x03\x04")  # a type crag does not read: said, not skipped
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
    live = (tmp_path / "index" / "CURRENT").read_text()
    model = CountingEmbedding()
    report = ingest([docs], tmp_path / "index", embed_model=model)
    assert (report.files_read, report.files_unchanged, report.chunks_added) == (0, 4, 0)
    assert model.__dict__.get("count", 0) == 0
    assert (tmp_path / "index" / "CURRENT").read_text() == live  # no new version written


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
        ("broken.jsonl", b'{not json\n', "broken.jsonl:1"),  # a line that cannot be read leaves out only itself
    ],
)
def test_an_unreadable_file_is_skipped_with_its_reason_and_the_old_index_survives(
    docs: Path, tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    ingest([docs], tmp_path / "index")
    before = ChunkIndex.load(tmp_path / "index")
    (docs / name).write_bytes(content)
    report = ingest([docs], tmp_path / "index")  # the other files are unchanged: nothing to write
    assert report.files_skipped == 1 and re.search(message, report.skipped[0])
    with pytest.raises(IngestError, match=message):  # given alone, nothing can go in: an error
        ingest([docs / name], tmp_path / "index")
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
    with pytest.raises(IngestError, match=r"disk holding .* is full; free some space .*\(the index is unchanged\)"):
        ingest([docs], tmp_path / "index")
    monkeypatch.undo()
    assert len(ChunkIndex.load(tmp_path / "index")) == before
    assert not [p for p in (tmp_path / "index").iterdir() if ".tmp-" in p.name]  # nothing half-written left


def test_an_interrupted_write_is_cleared_by_the_next_ingest(docs: Path, tmp_path: Path) -> None:
    ingest([docs], tmp_path / "index")
    (tmp_path / "index" / ".v9.tmp-deadbeef").mkdir()  # what a kill -9 mid-write leaves
    assert len(ChunkIndex.load(tmp_path / "index")) == 4
    (docs / "more.txt").write_text("Matcha is powdered green tea.")
    ingest([docs], tmp_path / "index")
    assert not (tmp_path / "index" / ".v9.tmp-deadbeef").exists()
    assert len(ChunkIndex.load(tmp_path / "index")) == 5


def test_a_second_writer_fails_at_once_with_a_clear_message(docs: Path, tmp_path: Path) -> None:
    ingest([docs], tmp_path / "index")
    with writer_lock(tmp_path / "index"):  # another ingest, mid-write
        with pytest.raises(IngestError, match="Another crag ingest is writing the index"):
            ingest([docs], tmp_path / "index")
    (docs / "more.txt").write_text("Matcha is powdered green tea.")
    assert ingest([docs], tmp_path / "index").chunks_added == 1  # the lock went with its holder


def test_an_incremental_ingest_keeps_the_same_statistics_as_a_full_one(docs: Path, tmp_path: Path) -> None:
    ingest([docs], tmp_path / "index")
    (docs / "notes.txt").write_text("Tea reached Europe in the 17th century. Green tea is popular.")
    (docs / "more.txt").write_text("Matcha is powdered green tea.")
    ingest([docs], tmp_path / "index")
    ingest([docs], tmp_path / "fresh")
    incremental, fresh = ChunkIndex.load(tmp_path / "index"), ChunkIndex.load(tmp_path / "fresh")
    by_text = {n.get_content(): i for i, n in enumerate(fresh.nodes)}
    order = [by_text[n.get_content()] for n in incremental.nodes]
    for query in ("green tea", "Europe century", "oolong oxidised", "unknown words"):
        np.testing.assert_allclose(incremental.bm25.scores(query), fresh.bm25.scores(query)[order], rtol=1e-5)
    for term in ("green", "tea", "europ", "matcha", "never-seen"):
        assert incremental.term_stats.idf(term) == pytest.approx(fresh.term_stats.idf(term))


def test_the_term_statistics_of_an_index_in_memory_name_only_terms_with_a_frequency(
    docs: Path, tmp_path: Path
) -> None:
    ingest([docs], tmp_path / "index")
    index = ChunkIndex.load(tmp_path / "index").in_memory()
    index.bm25.scores("green tea")  # the BM25 model is built after the statistics
    frequencies = dict(index.term_stats.doc_freq)  # every term the statistics name, with its count
    assert frequencies["tea"] >= 2 and all(count >= 1 for count in frequencies.values())


def test_a_question_reads_only_the_chunks_it_retrieves(
    docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest([docs], tmp_path / "index")
    read: list[int] = []
    original = NodeFile.__getitem__
    monkeypatch.setattr(NodeFile, "__iter__", lambda self: pytest.fail("a question iterated over every chunk"))
    monkeypatch.setattr(NodeFile, "__getitem__", lambda self, p: read.append(p) or original(self, p))
    workflow = build_workflow(Settings.load(env={}, index={"path": tmp_path / "index"}))
    workflow.ask("How hot should green tea be steeped?")
    assert read and len(set(read)) <= 5  # the retrieved chunks, at most top_k


def test_an_index_written_by_crag_0_1_says_how_to_upgrade_and_ingest_upgrades_it(
    docs: Path, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    ingest([docs], tmp_path / "new")
    new = ChunkIndex.load(tmp_path / "new")
    index.mkdir()  # the flat layout of format 1
    with open(index / "nodes.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(n.to_dict()) + "\n" for n in new.nodes)
    np.save(index / "embeddings.npy", np.asarray(new.embeddings))
    (index / "manifest.json").write_text(json.dumps({"format": 1, "chunker": new.chunker, "files": new.manifest}))
    (index / "vectors").mkdir()  # its embedded Chroma store
    with pytest.raises(IndexNotFoundError, match=r"earlier crag \(index format 1\)\. Upgrade it once with: crag ingest"):
        ChunkIndex.load(index)
    model = CountingEmbedding()
    report = ingest([docs], index, embed_model=model)
    assert report.files_read == 0 and model.__dict__.get("count", 0) == 0  # nothing read or embedded again
    upgraded = ChunkIndex.load(index)
    assert [n.node_id for n in upgraded.nodes] == [n.node_id for n in new.nodes]
    assert sorted(p.name for p in index.iterdir() if not p.name.startswith(".")) == ["CURRENT", "v1"]


def test_an_index_folder_behind_a_symlink_stays_a_symlink(docs: Path, tmp_path: Path) -> None:
    (tmp_path / "volume").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "volume")
    ingest([docs], tmp_path / "link")
    (docs / "more.txt").write_text("Matcha is powdered green tea.")
    ingest([docs], tmp_path / "link")
    assert (tmp_path / "link").is_symlink() and len(ChunkIndex.load(tmp_path / "volume")) == 5


def test_a_missing_index_says_how_to_build_one(tmp_path: Path) -> None:
    with pytest.raises(IndexNotFoundError, match="crag ingest"):
        ChunkIndex.load(tmp_path / "nowhere")


def test_missing_paths_and_empty_folders_are_errors(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="does not exist"):
        ingest([tmp_path / "nope"], tmp_path / "index")
    (tmp_path / "empty").mkdir()
    with pytest.raises(IngestError, match="No .txt"):
        ingest([tmp_path / "empty"], tmp_path / "index")


def test_markdown_headings_become_titles_and_sections_never_text(tmp_path: Path) -> None:
    (tmp_path / "gadgets.md").write_text(
        "# Gadgets\n\nWe sell gadgets.\n\n## Beta\n\nBeta gadgets are red and cost 40 euros.\n\n"
        "```\n# a comment in code, not a heading\n```\n"
    )
    ingest([tmp_path / "gadgets.md"], tmp_path / "index")
    chunks = list(ChunkIndex.load(tmp_path / "index").nodes)
    assert {c.metadata["title"] for c in chunks} == {"Gadgets"}
    beta = next(c for c in chunks if "red" in c.get_content())
    assert beta.metadata["section"] == "Gadgets / Beta" and "# a comment in code" in beta.get_content()
    assert not any(line.startswith(("# Gadgets", "## Beta")) for c in chunks for line in c.get_content().splitlines())
    answer = build_workflow(Settings.load(env={}, index={"path": tmp_path / "index"})).ask("What do Beta gadgets cost?")
    assert "40 euros" in answer.answer and "# Gadgets" not in answer.answer and "## Beta" not in answer.answer


def test_ingest_splits_sentences_once_and_a_question_splits_none_again(
    docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crag import text
    from crag.text import SPANS_KEY, sentences

    ingest([docs], tmp_path / "index")
    for node in ChunkIndex.load(tmp_path / "index").nodes:
        assert sentences(node.get_content(), node.metadata[SPANS_KEY]) == sentences(node.get_content())
        assert SPANS_KEY not in node.get_content(metadata_mode="embed")  # nor in the LLM's text
    split_again: list[str] = []
    monkeypatch.setattr(text, "_split", lambda t: split_again.append(t) or ())
    build_workflow(Settings.load(env={}, index={"path": tmp_path / "index"})).ask("How hot should green tea be steeped?")
    assert split_again == []
