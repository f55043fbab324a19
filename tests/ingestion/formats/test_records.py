"""Containers of records read a piece at a time: each record held to one document's limits, a
line past them dropped as it is read, a broken record named by its line, CSV rows as written."""

from __future__ import annotations

import codecs
import json
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crag.errors import IngestError
from crag.ingestion.files import ReadLimits
from crag.ingestion.formats.records import RecordsRead, file_lines, read_records, stream_records


def streamed(path: Path, limits: ReadLimits | None = None) -> tuple[list, RecordsRead]:
    found = RecordsRead()
    return list(stream_records(path, limits or ReadLimits(), found)), found


def test_a_line_past_the_record_limit_is_dropped_as_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    with path.open("wb") as f:  # one 12 MB line between two short ones
        f.write(b'{"doc_id": "a", "text": "first"}\n{"doc_id": "big", "text": "')
        for _ in range(12):
            f.write(b"x" * 2**20)
        f.write(b'"}\n{"doc_id": "b", "text": "last"}')
    tracemalloc.start()
    try:
        lines = [(n, line if line is None else len(line)) for n, line in file_lines(path, ReadLimits(max_text_mb=1))]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == [(1, 32), (2, None), (3, 31)]
    assert peak < 6 * 2**20  # a piece or two and the 1-million-character limit, never the 12 MB line


def test_a_corpus_streams_its_records_and_names_the_broken_ones(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"doc_id": "a", "text": "Alpha.", "url": "https://example.org/a"}\r\n'
                     b'{"doc_id": "b", "te\n'
                     b'\n'
                     b'{"doc_id": "c", "text": "Gamma \xe2\x80\xa8 line."}\n'  # U+2028 in a string: one line
                     b'{"doc_id": "d", "text": "   "}\n'
                     b'{"doc_id": 7, "text": ["no"]}')
    documents, found = streamed(path)
    assert [(d.doc_id, d.text) for d in documents] == [("a", "Alpha."), ("c", "Gamma \u2028 line.")]
    assert documents[0].metadata == {"title": "a", "file": str(path), "url": "https://example.org/a"}
    assert [n for n, _ in found.left_out] == [2, 6] and found.records == 2
    assert found.line(path) == (f"{path}:2: {found.left_out[0][1]}; left out, with 1 more record (line 6), "
                                "and the rest read (2 records).")
    assert "'text' must be a string" in found.left_out[1][1]
    with pytest.raises(IngestError, match=r"corpus\.jsonl:2: expected a JSON object with 'doc_id' and 'text'"):
        list(read_records(path, path.read_bytes()))  # read_documents's reader stops at the first


def test_a_table_streams_rows_as_written_each_group_led_by_the_header(tmp_path: Path) -> None:
    path = tmp_path / "sites.csv"
    rows = [f"S-{n},Site number {n},{n * 7} kWh" for n in range(40)]
    path.write_text("\n".join(["\n", "id,name,store", rows[0], '"S-x","two\nlines",1 kWh', 'bad,"quote"x,1',
                               *rows[1:]]) + "\n", encoding="utf-8")
    documents, found = streamed(path)
    assert all(d.text.startswith("id,name,store\n\n") for d in documents) and len(documents) > 2
    assert documents[0].text.split("\n\n")[1:3] == [rows[0], '"S-x","two\nlines",1 kWh']
    assert documents[0].metadata["rows"].startswith("4-") and documents[-1].metadata["rows"].endswith(f"-{6 + 40}")
    assert sum(d.text.count(" kWh") for d in documents) == 41
    assert found.left_out == [(7, "not a readable CSV row (',' expected after '\"')")]
    assert found.records == 41


def test_a_utf16_table_from_excel_streams_and_a_bad_byte_is_named_by_its_line(tmp_path: Path) -> None:
    path = tmp_path / "unicode.csv"
    path.write_bytes(codecs.BOM_UTF16_LE + "name\tcity\nAnn\tBrno\nBo\tDecin\n".encode("utf-16-le"))
    documents, _ = streamed(path)
    assert [d.text for d in documents] == ["name\tcity\n\nAnn\tBrno\n\nBo\tDecin"]
    path.write_bytes(b"name,city\nAnn,Brno\nBo,D\xe9cin\n")
    with pytest.raises(IngestError, match=r"not UTF-8 text \(byte 0xe9 on line 3;"):
        streamed(path)
    path.write_bytes(b"name,city\nAnn,Brno\nBo,Decin\xec\x97")  # a character cut off at the end
    with pytest.raises(IngestError, match=r"not UTF-8 text \(byte 0xec on line 3;"):
        streamed(path)


def test_a_file_over_max_file_mb_is_refused_before_a_record_is_read(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"doc_id": "a", "text": "x"}\n' * 50_000)  # 1.4 MB
    with pytest.raises(IngestError, match=r"over ingest.max_file_mb \(1 MB\)"):
        streamed(path, ReadLimits(max_file_mb=1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(
    st.fixed_dictionaries({"doc_id": st.text(min_size=1, max_size=5), "text": st.text(max_size=30)}).map(json.dumps),
    st.text(alphabet=st.characters(blacklist_characters="\n"), max_size=20),
    st.sampled_from(["a,b,c", '"x\ny",1', '"open', "\r", ""]),
), max_size=8), st.sampled_from([".jsonl", ".csv", ".tsv"]))
def test_streaming_a_file_reads_what_reading_it_whole_reads(tmp_path: Path, lines: list[str], suffix: str) -> None:
    path = tmp_path / f"records{suffix}"
    data = "\n".join(lines).encode("utf-8", "surrogatepass")  # a lone surrogate: bytes that are not UTF-8
    path.write_bytes(data)
    try:
        whole = [(d.doc_id, d.text, d.metadata) for d in read_records(path, data)]
    except IngestError:
        whole = None
    try:
        documents, found = streamed(path)
    except IngestError as exc:  # the file itself (not UTF-8), not one record
        assert whole is None and str(path) in str(exc)
        return
    assert whole is None if found.left_out else whole == [(d.doc_id, d.text, d.metadata) for d in documents]
