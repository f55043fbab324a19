"""The ingest as a whole over containers of records and hostile metadata: a corpus bigger than
one document's limit goes in record by record, a bad record is named while the rest go in,
metadata never crowds a chunk out, and documents are let go batch by batch."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import Document, MetadataMode
from llama_index.core.utils import get_tokenizer
from support.paths import DOCUMENTS

from crag import ChunkIndex, ingest
from crag.errors import IngestError
from crag.ingestion import batches
from crag.ingestion.files import ReadLimits

SENTENCE = "The Helio H10 keeps {} percent of its capacity after many cycles of charging. "


def corpus(path: Path, records: int, words: int = 6, **extra: str) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for n in range(records):
            text = "".join(SENTENCE.format(n * 100 + k) for k in range(words))
            f.write(json.dumps({"doc_id": f"d{n}", "title": f"Passage {n}", "text": text, **extra}) + "\n")
    return path


def test_a_corpus_over_one_documents_text_limit_goes_in_whole_record_by_record(tmp_path: Path) -> None:
    path = corpus(tmp_path / "corpus.jsonl", 60)  # 29 KB: 0.03 million characters, past the limit below
    report = ingest([path], tmp_path / "index", limits=ReadLimits(max_text_mb=0.01))
    assert (report.files_read, report.documents, report.skipped) == (1, 60, [])
    assert {n.ref_doc_id for n in ChunkIndex.load(tmp_path / "index").nodes} == {f"d{n}" for n in range(60)}


def test_a_record_over_the_limit_and_a_broken_line_are_named_and_the_rest_go_in(tmp_path: Path) -> None:
    path = corpus(tmp_path / "corpus.jsonl", 3)
    lines = path.read_text(encoding="utf-8").splitlines()
    long = json.dumps({"doc_id": "long", "text": "word " * 4_000})  # 20,000 characters
    path.write_text("\n".join([lines[0], long, lines[1], '{"doc_id": "cut", "te', lines[2]]) + "\n", encoding="utf-8")
    report = ingest([path], tmp_path / "index", limits=ReadLimits(max_text_mb=0.01))
    assert (report.files_read, report.files_skipped, report.files_partly_read, report.documents) == (1, 0, 1, 3)
    (line,) = report.skipped
    assert line.startswith(f"{path}:2: over 0.01 million characters (ingest.max_text_mb")
    assert "with 1 more record (line 4), and the rest read (3 records)." in line
    assert {n.ref_doc_id for n in ChunkIndex.load(tmp_path / "index").nodes} == {"d0", "d1", "d2"}
    again = ingest([path], tmp_path / "index", limits=ReadLimits(max_text_mb=0.01))  # recorded as read
    assert (again.files_unchanged, again.skipped) == (1, [])


def test_a_corpus_with_no_readable_record_is_left_out_by_its_first_line(tmp_path: Path) -> None:
    (tmp_path / "list.jsonl").write_text('["doc_id", "text"]\n[]\n', encoding="utf-8")
    with pytest.raises(IngestError, match=r"list\.jsonl:1: expected a JSON object with 'doc_id' and 'text'"):
        ingest([tmp_path / "list.jsonl"], tmp_path / "index")


def test_a_file_that_fails_after_a_batch_was_cut_leaves_none_of_its_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batches, "BATCH_CHARS", 200_000)
    (tmp_path / "docs").mkdir()
    corpus(tmp_path / "docs" / "a.jsonl", 5)
    bad = corpus(tmp_path / "docs" / "b.jsonl", 2_400)  # 1.1 MB: its first piece is cut before the second is read
    bad.write_bytes(bad.read_bytes() + b'{"doc_id": "x", "text": "caf\xe9"}\n')  # not UTF-8, on line 2,401
    report = ingest([tmp_path / "docs"], tmp_path / "index")
    assert report.files_read == 1 and report.skipped == [
        f"{bad} is not UTF-8 text (byte 0xe9 on line 2401; mixed or legacy encoding); save it as UTF-8 and ingest it again."]
    assert {n.ref_doc_id for n in ChunkIndex.load(tmp_path / "index").nodes} == {f"d{n}" for n in range(5)}


# --- metadata never longer than a chunk's room ---------------------------------------------------


def epub_with_creator(path: Path, creator: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(DOCUMENTS))
    import make_fixtures

    path.write_bytes(make_fixtures.epub({"OEBPS/content.opf": make_fixtures.epub_package(creators=[creator])}))
    return path


def test_an_epub_whose_author_is_longer_than_a_chunk_goes_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "books").mkdir()
    epub_with_creator(tmp_path / "books" / "book.epub", " ".join(["Ambrose Bierce"] * 128), monkeypatch)  # 1,919 chars
    (tmp_path / "books" / "notes.txt").write_text("Dawn: the time when men of reason go to bed.", encoding="utf-8")
    report = ingest([tmp_path / "books"], tmp_path / "index")  # was: ValueError, Metadata length ... chunk size
    assert report.files_read == 2 and not report.skipped
    for node in ChunkIndex.load(tmp_path / "index").nodes:
        assert len(node.get_metadata_str(MetadataMode.EMBED)) < 64 * 4  # a quarter of 256 tokens
        assert node.metadata.get("author", "Ambrose").startswith("Ambrose")


def test_a_records_url_is_never_embedded_and_takes_no_room_from_its_chunks(tmp_path: Path) -> None:
    plain = corpus(tmp_path / "plain.jsonl", 20, words=40)
    linked = corpus(tmp_path / "linked.jsonl", 20, words=40, url="https://example.org/" + "a/b-" * 110)  # 460 chars
    huge = corpus(tmp_path / "huge.jsonl", 2, url="https://example.org/" + "x" * 3_000)
    assert ingest([huge], tmp_path / "huge").documents == 2  # was: ValueError, Metadata length ... chunk size
    chunks = {}
    for path in (plain, linked):
        chunks[path.name] = ingest([path], tmp_path / path.stem).chunks_added
        nodes = ChunkIndex.load(tmp_path / path.stem).nodes
        assert all("https://" not in n.get_content(MetadataMode.EMBED) for n in nodes)
        assert all("https://" not in n.get_content(MetadataMode.LLM) for n in nodes)
    assert chunks["linked.jsonl"] == chunks["plain.jsonl"]  # was: about twice as many, each half as long
    assert next(iter(ChunkIndex.load(tmp_path / "linked").nodes)).metadata["url"].startswith("https://example.org/a/b-")


def test_given_documents_metadata_is_cut_to_a_quarter_of_the_chunk(tmp_path: Path) -> None:
    documents = [Document(text=SENTENCE.format(n) * 30, id_=f"g{n}",
                          metadata={"author": "Ann Lee " * 300, "tags": list(range(500)), "year": "2024"})
                 for n in range(2)]
    report = ingest(None, tmp_path / "index", documents=documents)
    assert report.documents == 2
    node = next(iter(ChunkIndex.load(tmp_path / "index").nodes))
    shown = node.get_metadata_str(MetadataMode.EMBED)
    assert "year: 2024" in shown and "author: Ann Lee Ann Lee" in shown and "tags" not in shown
    assert shown.endswith("…") or "…\n" in shown
    assert len(get_tokenizer()(shown)) <= 64


# --- memory: documents let go batch by batch ----------------------------------------------------


def test_documents_are_cut_a_batch_at_a_time_and_let_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batches, "BATCH_CHARS", 20_000)  # about 40 records of 470 characters
    path = corpus(tmp_path / "corpus.jsonl", 400)  # 190,000 characters: ten batches
    held: list[int] = []

    class Counting(SentenceSplitter):
        def get_nodes_from_documents(self, documents: list, show_progress: bool = False, **kwargs: object) -> list:
            gc.collect()
            held.append(sum(isinstance(o, Document) for o in gc.get_objects()))
            return super().get_nodes_from_documents(documents, show_progress, **kwargs)

    report = ingest([path], tmp_path / "index", node_parser=Counting(chunk_size=256, chunk_overlap=32))
    assert report.documents == 400 and len(held) >= 9
    assert max(held) <= 60  # one batch's documents (and a few the process holds), not the corpus's 400
