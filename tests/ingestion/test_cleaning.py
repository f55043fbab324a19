"""Every document's text and metadata are valid Unicode before anything encodes them (issue 40):
docling's Korean PDFs made pypdf return a lone surrogate, and `crag ingest` ended with
"internal error: UnicodeEncodeError … surrogates not allowed", no index written, no file named."""

from __future__ import annotations

from pathlib import Path

from llama_index.core.schema import Document
from support.odd_text import LONE, surrogate_pdf

from crag import ChunkIndex
from crag.ingestion import ingest
from crag.ingestion.cleaning import clean, valid_unicode


def test_a_lone_surrogate_becomes_the_replacement_character_and_a_pair_its_character() -> None:
    assert valid_unicode(f"a{LONE}b\udc00") == "a\ufffdb\ufffd"
    assert valid_unicode("smile \ud83d\ude00") == "smile \U0001f600"
    text = "plain, or Korean: 한국어"
    assert valid_unicode(text) is text  # nothing to do: no copy


def test_clean_makes_the_text_and_every_metadata_string_encodable() -> None:
    document = clean(Document(text=f"Table 1{LONE}", metadata={"title": f"Report{LONE}", "author": LONE,
                                                                 f"key{LONE}": 3}))
    assert document.text == "Table 1\ufffd"
    assert document.metadata == {"title": "Report\ufffd", "author": "\ufffd", "key\ufffd": 3}
    document.text.encode("utf-8")


def test_a_pdf_whose_text_holds_a_lone_surrogate_is_read_and_the_folder_ingested(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "korean.pdf").write_bytes(surrogate_pdf("The lamp runs for ten hours"))
    (folder / "warranty.md").write_text("Lumen gives a three-year warranty.", encoding="utf-8")
    report = ingest([folder], tmp_path / "index")
    assert (report.files_read, report.skipped) == (2, [])
    texts = [n.get_content() for n in ChunkIndex.load(tmp_path / "index").nodes]
    assert any("The lamp runs for ten hours A\ufffd" in text for text in texts), texts
