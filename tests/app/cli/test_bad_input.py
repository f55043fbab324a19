"""Bad input at the command line: each is one line on stderr, `crag: error: ...`, naming the
problem, and a non-zero exit code; nothing is half-done (an index is not replaced by a
broken or empty one, and nothing that is not an index is ever deleted)."""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import crag
from crag.app.cli import PARTIAL, main

pytestmark = pytest.mark.usefixtures("no_config_file")

DOCS = {
    "battery.md": "# Battery\nThe Zephyr drone battery lasts 42 minutes per charge.\n",
    "camera.md": "# Camera\nThe Zephyr camera records 4K video at 60 frames per second.\n",
}


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def index_dir(docs: Path, tmp_path: Path) -> Path:
    crag.ingest([docs], tmp_path / "index")
    return tmp_path / "index"


def fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run `crag *argv`; it must fail with exit code 2 and one `crag: error:` line, returned."""
    code = main([*argv, "--quiet"] if argv[0] in ("ask", "ingest") else list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("crag: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


# --- the question -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "message"),
    [
        ("", "The question is empty"),
        (" \t\n ", "The question is empty"),
        ("x" * 1_000_000, "The question is 1000000 characters long; the limit is 4000"),
        ("why " * 250_000, "the limit is 4000"),
    ],
    ids=["empty", "whitespace", "one-megabyte", "a-million-characters-of-words"],
)
def test_an_unusable_question_is_refused_before_any_work(
    capsys: pytest.CaptureFixture[str], index_dir: Path, question: str, message: str
) -> None:
    assert message in fails(capsys, "ask", question, "--index", str(index_dir))


@pytest.mark.parametrize("question", ["???", "\x00\x01\x02", "🙂🙂🙂", "the of and", "a" * 3999])
def test_a_question_without_searchable_words_is_answered_as_not_found(
    capsys: pytest.CaptureFixture[str], index_dir: Path, question: str
) -> None:
    assert main(["ask", question, "--index", str(index_dir), "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "incorrect" and out["answer"]


# --- the files to ingest --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("latin1.txt", "Caf\xe9 cr\xe8me".encode("latin-1"), "latin1.txt is not UTF-8 text"),
        ("image.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image.md is not UTF-8 text"),
        ("nul.txt", b"text\x00with a NUL", "nul.txt looks binary"),
        ("page.html", bytes(range(256)), "page.html is not UTF-8 text"),
        ("broken.jsonl", b'{"doc_id": "b", "te', "broken.jsonl:1"),  # one line: the rest of a corpus goes in
        ("list.jsonl", b'["doc_id", "text"]\n', "list.jsonl:1: expected a JSON object"),
        ("no-text.jsonl", b'{"doc_id": "a", "body": "x"}\n', "no-text.jsonl:1: expected a JSON object"),
        ("report.pdf", b"%PDF-1.4", "report.pdf is not a readable PDF (damaged or truncated"),
        ("sheet.xlsx", b"PK\x03\x04", "sheet.xlsx is not an Excel workbook"),
    ],
)
def test_an_unreadable_file_is_named_and_the_old_index_is_kept(
    capsys: pytest.CaptureFixture[str], index_dir: Path, tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    before = [n.node_id for n in crag.ChunkIndex.load(index_dir).nodes]
    bad = tmp_path / name
    bad.write_bytes(content)
    assert message in fails(capsys, "ingest", str(bad), "--index", str(index_dir))
    assert [n.node_id for n in crag.ChunkIndex.load(index_dir).nodes] == before


@pytest.mark.parametrize(
    ("name", "content"),
    [("empty.jsonl", ""), ("blank-lines.jsonl", "\n\n  \n"), ("spaces.txt", "   \n\t\n"), ("empty.md", "")],
)
def test_files_without_text_are_an_error_not_an_empty_index(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, content: str
) -> None:
    (tmp_path / name).write_text(content, encoding="utf-8")
    message = fails(capsys, "ingest", str(tmp_path / name), "--index", str(tmp_path / "index"))
    assert f"No text to index in {name}" in message
    assert not (tmp_path / "index").exists()


def test_an_empty_folder_is_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    message = fails(capsys, "ingest", str(tmp_path / "empty"), "--index", str(tmp_path / "index"))
    # the kinds crag reads, images too where the ocr extra reads them
    assert re.search(r"No \.txt, \.md, \.html, \.jsonl, \.pdf, \.docx, \.epub, \.pptx, \.ipynb, \.csv, \.tsv"
                     r"( or \.xlsx|, \.xlsx, \.png, \.jpg, \.jpeg, \.tif or \.tiff) files found in", message)


def test_a_chunk_overlap_not_smaller_than_the_chunk_size_is_a_settings_error(
    capsys: pytest.CaptureFixture[str], docs: Path, tmp_path: Path
) -> None:
    message = fails(capsys, "ingest", str(docs), "--index", str(tmp_path / "index"), "--chunk-size", "20")
    assert "index.chunk_overlap (32) must be smaller than index.chunk_size (20)" in message


# --- where the index goes ----------------------------------------------------------------------------


def test_ingesting_into_a_folder_that_is_not_an_index_leaves_the_folder_alone(
    capsys: pytest.CaptureFixture[str], docs: Path
) -> None:
    """`crag ingest docs --index docs` (a slip of the fingers) must not replace the documents
    with an index: writing an index swaps the whole folder and deletes the old one."""
    message = fails(capsys, "ingest", str(docs), "--index", str(docs))
    assert "is a folder of other things" in message and "not a crag index" in message
    assert sorted(p.name for p in docs.iterdir()) == sorted(DOCS)


def test_ingesting_into_a_file_leaves_the_file_alone(
    capsys: pytest.CaptureFixture[str], docs: Path, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes", encoding="utf-8")
    assert "is a file, not a crag index folder" in fails(capsys, "ingest", str(docs), "--index", str(notes))
    assert notes.read_text(encoding="utf-8") == "my notes"


# --- a missing or damaged index --------------------------------------------------------------------


def live(index: Path) -> Path:
    """The folder of the index's live version."""
    return index / (index / "CURRENT").read_text(encoding="utf-8").strip()


def truncate_nodes(index: Path) -> None:
    data = (live(index) / "nodes.jsonl").read_bytes()
    (live(index) / "nodes.jsonl").write_bytes(data[:-40])  # the last chunk cut short, as by a full disk


def garbage_embeddings(index: Path) -> None:
    (live(index) / "embeddings.npy").write_bytes(b"this is not an array" * 10)


def more_embeddings_than_chunks(index: Path) -> None:
    np.save(live(index) / "embeddings.npy", np.zeros((len(DOCS) + 3, 256), dtype=np.float32))


def embeddings_of_another_model(index: Path) -> None:
    np.save(live(index) / "embeddings.npy", np.zeros((len(DOCS), 384), dtype=np.float32))


def overwrite_nodes(replacement: bytes) -> Callable[[Path], None]:
    """Damage in place, the file's length unchanged, so only reading a chunk finds it."""
    def damage(index: Path) -> None:
        data = (live(index) / "nodes.jsonl").read_bytes()
        (live(index) / "nodes.jsonl").write_bytes(replacement + data[len(replacement):])
    damage.__name__ = f"nodes_overwritten_with_{replacement[:4]!r}"
    return damage


def manifest_missing(index: Path) -> None:
    (live(index) / "manifest.json").unlink()


def manifest_not_crags(index: Path) -> None:
    (live(index) / "manifest.json").write_text("[1, 2, 3]", encoding="utf-8")


def embeddings_missing(index: Path) -> None:
    (live(index) / "embeddings.npy").unlink()


def pointer_to_nowhere(index: Path) -> None:
    (index / "CURRENT").write_text("v99\n", encoding="utf-8")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (truncate_nodes, "is inconsistent (nodes.jsonl is not the length its offsets say)"),
        (garbage_embeddings, "is unreadable (embeddings.npy is not a NumPy array file)"),
        (embeddings_missing, "is unreadable (embeddings.npy is missing)"),
        (more_embeddings_than_chunks, "is inconsistent (manifest 2, chunks 2, embeddings 5, lexical 2)"),
        (embeddings_of_another_model, "is inconsistent (embeddings are float32 (2, 384), expected float32 (chunks, 256))"),
        (overwrite_nodes(b'{"x": 1}     '), "is unreadable (nodes.jsonl line 1 is not a chunk)"),
        (overwrite_nodes(b"\xff\xfe\x00\x01"), "is unreadable (nodes.jsonl line 1 is not a chunk)"),
        (manifest_missing, "is unreadable (manifest.json is missing)"),
        (manifest_not_crags, "is unreadable (manifest.json is not crag's manifest)"),
        (pointer_to_nowhere, "is damaged (CURRENT names no version)"),
    ],
)
def test_a_damaged_index_is_named_with_what_is_wrong_and_how_to_rebuild_it(
    capsys: pytest.CaptureFixture[str], index_dir: Path, docs: Path, damage, message: str
) -> None:
    damage(index_dir)
    error = fails(capsys, "ask", "How long does the battery last?", "--index", str(index_dir))
    assert f"The index at {index_dir} {message}" in error
    assert f"remove the folder and build it again: crag ingest YOUR_DOCS --index {index_dir}" in error
    # ingesting into it fails too, rather than guessing what it held
    assert "remove the folder and build it again" in fails(capsys, "ingest", str(docs), "--index", str(index_dir))


def test_a_missing_index_says_how_to_build_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    message = fails(capsys, "ask", "anything?", "--index", str(tmp_path / "nowhere"))
    assert f"No crag index at {tmp_path / 'nowhere'}. Build one first: crag ingest" in message


def test_an_index_path_that_is_a_file_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "index").write_text("not a folder", encoding="utf-8")
    assert "is a file, not a crag index folder" in fails(capsys, "ask", "anything?", "--index", str(tmp_path / "index"))


# --- settings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[grader]\nkind = "magic"\n', "grader.kind: Input should be 'auto', 'lexical', 'llm', 'rerank' or 'cascade'"),
        ('[synthesizer]\nkind = "gpt"\n', "synthesizer.kind: Input should be"),
        ('[web_search]\nkind = "google"\n', "web_search.kind: Input should be"),
        ("[grader]\nupper = 0.2\nlower = 0.5\n", "grader.lower (0.5) must not exceed grader.upper (0.2)"),
        ("[grader]\nupper = 1.5\n", "grader.upper: Input should be less than or equal to 1"),
        ('[grader]\nupper = "high"\n', "grader.upper: Input should be a valid number"),
        ("[grader]\nuper = 0.7\n", "grader.uper: Extra inputs are not permitted"),
        ("[grader]\n[grader]\n", "is not valid TOML"),
        ("a = " + "[" * 100_000, "is not valid TOML: maximum recursion depth exceeded"),
        ("grader = 3\n", "Config section [grader] must be a table of settings"),
        ("[retriever]\ntop_k = 0\n", "retriever.top_k: Input should be greater than 0"),
        ('[web_search]\nkind = "tavily"\n', "web_search.kind is 'tavily' but TAVILY_API_KEY is not set"),
        ('[grader]\nkind = "llm"\n', "An LLM component was chosen but no model is configured"),
    ],
)
def test_a_bad_setting_is_named(
    capsys: pytest.CaptureFixture[str], index_dir: Path, tmp_path: Path, toml: str, message: str
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(toml, encoding="utf-8")
    assert message in fails(capsys, "--config", str(config), "ask", "How long?", "--index", str(index_dir))


def test_a_bad_threshold_on_the_command_line_is_named(capsys: pytest.CaptureFixture[str], index_dir: Path) -> None:
    message = fails(capsys, "ask", "How long?", "--index", str(index_dir), "--upper", "0.3", "--lower", "0.6")
    assert "grader.lower (0.6) must not exceed grader.upper (0.3)" in message


def test_a_lower_threshold_above_the_graders_own_upper_is_named(
    capsys: pytest.CaptureFixture[str], index_dir: Path
) -> None:
    message = fails(capsys, "ask", "How long?", "--index", str(index_dir), "--lower", "0.99")
    assert "lower threshold (0.99) must not exceed upper" in message and "(the grader's own)" in message


def test_a_bad_setting_in_the_environment_is_named(
    capsys: pytest.CaptureFixture[str], index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAG_GRADER__UPPER", "very")
    assert "grader.upper: Input should be a valid number" in fails(capsys, "ask", "How long?", "--index", str(index_dir))


def test_a_config_file_that_is_not_text_or_not_there_is_named(
    capsys: pytest.CaptureFixture[str], index_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe[grader]")
    assert "binary.toml is not valid TOML" in fails(
        capsys, "--config", str(tmp_path / "binary.toml"), "ask", "How long?", "--index", str(index_dir)
    )
    assert "missing.toml does not exist" in fails(
        capsys, "--config", str(tmp_path / "missing.toml"), "ask", "How long?", "--index", str(index_dir)
    )


# --- paths that are not the file they should be -------------------------------------------------


def test_a_folder_given_as_a_file_is_named(capsys: pytest.CaptureFixture[str], index_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "somedir"
    folder.mkdir()
    assert "somedir is a folder" in fails(capsys, "--config", str(folder), "ask", "How long?", "--index", str(index_dir))
    assert "Cannot write the trace to" in fails(
        capsys, "ask", "How long does the battery last?", "--index", str(index_dir), "--trace", str(folder)
    )
    assert f"Cannot write {folder}: Is a directory" in fails(capsys, "draw", "--out", str(folder))
    assert "Cannot read the trace" in fails(capsys, "draw", "--trace", str(folder))
    assert sorted(folder.iterdir()) == []


def test_a_named_pipe_is_refused_not_waited_on(capsys: pytest.CaptureFixture[str], index_dir: Path, tmp_path: Path) -> None:
    before = [n.node_id for n in crag.ChunkIndex.load(index_dir).nodes]
    os.mkfifo(tmp_path / "pipe.txt")
    assert "pipe.txt is not a regular file" in fails(capsys, "ingest", str(tmp_path / "pipe.txt"), "--index", str(index_dir))
    (tmp_path / "docs" / "pipe.md").unlink(missing_ok=True)
    os.mkfifo(tmp_path / "docs" / "pipe.md")  # inside a folder it is passed over, with its line
    assert main(["ingest", str(tmp_path / "docs"), "--index", str(index_dir), "--quiet"]) == 3
    assert "pipe.md is a named pipe, not a regular file" in capsys.readouterr().err
    assert [n.node_id for n in crag.ChunkIndex.load(index_dir).nodes] == before


def test_a_file_without_read_permission_is_named(
    capsys: pytest.CaptureFixture[str], index_dir: Path, docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root, chmod 000 does not stop reading, so the refusal is simulated."""
    config = tmp_path / "crag.toml"
    config.write_text("[grader]\n", encoding="utf-8")
    real_open = Path.open

    def refuse(self: Path, *args, **kwargs):
        if self.name in ("battery.md", "crag.toml"):
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    real_os_open = os.open

    def refuse_fd(path, flags, *args, **kwargs):  # how crag opens a file to ingest
        if Path(path).name == "battery.md":
            raise PermissionError(13, "Permission denied", str(path))
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse_fd)
    monkeypatch.setattr(Path, "open", refuse)
    monkeypatch.setattr(Path, "read_bytes", lambda self: refuse(self, "rb").read())
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: refuse(self, encoding=encoding).read())
    before = [n.node_id for n in crag.ChunkIndex.load(index_dir).nodes]
    assert "Cannot read" in fails(capsys, "ingest", str(docs / "battery.md"), "--index", str(index_dir))
    assert [n.node_id for n in crag.ChunkIndex.load(index_dir).nodes] == before
    assert "Cannot read config file" in fails(capsys, "--config", str(config), "ask", "How long?", "--index", str(index_dir))


# --- text that is not text, JSON nested past reading ---------------------------------------------


def test_a_question_that_is_not_utf8_is_named(capsys: pytest.CaptureFixture[str], index_dir: Path, tmp_path: Path) -> None:
    """A byte that is not UTF-8 in argv reaches Python as a lone surrogate ('\\udc80')."""
    for extra in ([], ["--json"], ["--trace", str(tmp_path / "t.json")]):
        message = fails(capsys, "ask", "\udc80abc battery", "--index", str(index_dir), *extra)
        assert "The question is not UTF-8 text (at character 1)" in message
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"doc_id": "a", "text": "battery \\ud800 life"}', "holds a lone surrogate"),
        (b'{"doc_id": "\\udfff", "text": "battery life"}', "holds a lone surrogate"),
        (b'{"doc_id": "a", "text": "ok", "title": "\\ud83d"}', "holds a lone surrogate"),
        (b"[" * 100_000, "JSON nested too deeply to read"),
        (b'{"doc_id": "a", "text": ' + b"[" * 100_000, "JSON nested too deeply to read"),
    ],
    ids=["text", "doc-id", "title", "deep-list", "deep-text"],
)
def test_a_corpus_line_that_cannot_be_indexed_is_named_and_the_other_lines_go_in(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, line: bytes, message: str
) -> None:
    (tmp_path / "corpus.jsonl").write_bytes(b'{"doc_id": "ok", "text": "fine"}\n' + line + b"\n")
    assert main(["ingest", str(tmp_path / "corpus.jsonl"), "--index", str(tmp_path / "index"), "--quiet"]) == PARTIAL
    err = capsys.readouterr().err
    assert f"corpus.jsonl:2: {message}" in err and "left out, and the rest read (1 record)." in err
    assert [n.ref_doc_id for n in crag.ChunkIndex.load(tmp_path / "index").nodes] == ["ok"]


def test_a_paired_surrogate_escape_is_ordinary_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_bytes(b'{"doc_id": "a", "text": "The drone \\ud83d\\ude81 flies 42 minutes."}\n')
    assert main(["ingest", str(tmp_path / "corpus.jsonl"), "--index", str(tmp_path / "index"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["ask", "How long does the drone fly?", "--index", str(tmp_path / "index"), "--json", "--quiet"]) == 0
    assert "\U0001f681" in json.loads(capsys.readouterr().out)["answer"]


def test_a_file_name_that_is_not_utf8_is_named(capsys: pytest.CaptureFixture[str], docs: Path, tmp_path: Path) -> None:
    (docs / "\udcff.txt").write_text("The battery lasts 42 minutes.", encoding="utf-8")  # b"\xff.txt" on disk
    assert "the file's name is not UTF-8" in fails(capsys, "ingest", str(docs), "--index", str(tmp_path / "index"))
    assert not (tmp_path / "index").exists()


def test_an_index_path_that_is_not_utf8_is_printed_not_a_crash(
    docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A strict UTF-8 stdout (a UTF-8 locale other than C.UTF-8) cannot encode b"\xfe" of argv."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["ingest", str(docs), "--index", str(tmp_path / "\udcfe"), "--quiet"]) == 0
    out.flush()
    assert out.buffer.getvalue().decode("utf-8").endswith("\\udcfe\n")


# --- large inputs ---------------------------------------------------------------------------------


def test_a_long_paragraph_is_cut_at_sentence_or_word_boundaries_and_short_text_is_unchanged() -> None:
    from crag.ingestion.readers import PARAGRAPH_LIMIT, bounded_paragraphs

    short = "The battery lasts 42 minutes.\n\nThe camera records 4K video. " * 100
    assert bounded_paragraphs(short) == short
    long = "The Zephyr battery lasts 42 minutes per charge. " * 5_000
    cut = bounded_paragraphs(long)
    assert max(map(len, cut.split("\n\n\n"))) <= PARAGRAPH_LIMIT and cut.split() == long.split()
    assert all(p.endswith("charge.") for p in cut.split("\n\n\n")[:-1])
    for text in ("word " * 10_000, "x" * 50_000):  # no sentence end; no space at all
        cut = bounded_paragraphs(text)
        assert max(map(len, cut.split("\n\n\n"))) <= PARAGRAPH_LIMIT and "".join(cut.split()) == "".join(text.split())


def test_a_five_megabyte_paragraph_is_ingested_with_every_sentence_split_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NLTK runs Punkt's regexes under a 5 s wall-clock limit: no call may get the whole file."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    from crag.ingestion.readers import PARAGRAPH_LIMIT

    longest = 0
    span_tokenize = PunktSentenceTokenizer.span_tokenize

    def spy(self, text: str, *args, **kwargs):
        nonlocal longest
        longest = max(longest, len(text))
        return span_tokenize(self, text, *args, **kwargs)

    monkeypatch.setattr(PunktSentenceTokenizer, "span_tokenize", spy)
    sentence = "The Zephyr drone battery lasts forty two minutes per charge in calm weather. "
    (tmp_path / "big.txt").write_text(sentence * (5_000_000 // len(sentence)), encoding="utf-8")
    report = crag.ingest([tmp_path / "big.txt"], tmp_path / "index", chunk_size=2048)
    assert report.chunks_total > 100 and 0 < longest <= PARAGRAPH_LIMIT
