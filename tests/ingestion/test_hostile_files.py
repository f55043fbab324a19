"""Hostile files can't hurt (issue 32): a zip bomb, a PDF that reads for minutes, a sparse or
special file, a link out of the folder, a file of endless text. Each is left out with one line
saying why, within the limits of `[ingest]`, and the good files beside it are ingested.

Every hostile file is made in the test. Where today's code could fill memory, the read runs in
a forked child held to an address-space limit, and the bound is asserted from that child's
peak resident memory, never from the clock.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from support.hostile import (
    bzip2_bomb,
    deflated,
    docx_bytes,
    empty_paragraphs,
    epub_members,
    repeated,
    slow_pdf,
)
from support.paths import REPO

from crag import ChunkIndex, Settings, build_workflow
from crag.config import IngestSettings
from crag.errors import ConfigError, IngestError
from crag.ingestion import ingest
from crag.ingestion.files import ReadLimits
from crag.ingestion.readers import read_documents

MB = 1024 * 1024


def bounded(function: Callable[[], object], memory_mb: int = 768) -> tuple[str, float]:
    """Run `function` in a forked child whose address space may grow by `memory_mb`: what it
    returned or raised, as text, and the megabytes of memory it added at its peak."""
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe()

    def child() -> None:
        with open("/proc/self/statm") as statm:
            size = int(statm.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (size + memory_mb * MB, resource.RLIM_INFINITY))
        start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            outcome = repr(function())
        except BaseException as exc:  # noqa: BLE001 - reported to the test, which judges it
            outcome = f"{type(exc).__name__}: {exc}"
        theirs.send((outcome, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start) / 1024))

    process = context.Process(target=child)
    process.start()
    outcome = ours.recv() if ours.poll(300) else ("no answer", 0.0)
    process.kill()
    process.join()
    return outcome


def read(path: Path, **limits: float) -> Callable[[], object]:
    """Read `path` with these `[ingest]` limits (the defaults where none is given)."""
    given = {"limits": ReadLimits(**limits)} if limits else {}
    return lambda: [d.text[:40] for d in read_documents(path, **given)]


def test_the_limits_are_settings_and_the_example_file_gives_their_defaults() -> None:
    example = REPO / "crag.example.toml"
    assert Settings.load(example, env={}).ingest == IngestSettings()
    settings = Settings.load(env={"CRAG_INGEST__SYMLINKS": "inside", "CRAG_INGEST__MAX_SECONDS": "5"})
    assert (settings.ingest.symlinks, settings.ingest.max_seconds) == ("inside", 5.0)
    with pytest.raises(ConfigError, match="ingest.symlinks"):
        Settings.load(env={}, ingest={"symlinks": "always"})
    with pytest.raises(ConfigError, match="ingest.max_memory_mb"):
        Settings.load(env={}, ingest={"max_memory_mb": 0})


# --- zip bombs: counted as they unpack, never as they claim --------------------------------------


@pytest.mark.parametrize(("name", "member"), [("bomb.docx", "word/document.xml"),
                                              ("bomb.epub", "META-INF/container.xml"),
                                              ("bomb.pptx", "ppt/presentation.xml")])
def test_a_bzip2_member_is_refused_before_it_unpacks(tmp_path: Path, name: str, member: str) -> None:
    """Python's zipfile unpacks a bzip2 member whole before cutting it to its claimed size."""
    if name.endswith(".pptx"):
        pytest.importorskip("pptx")  # the office extra
    path = bzip2_bomb(tmp_path / name, member, {"[Content_Types].xml": b"<Types/>"})
    outcome, added = bounded(read(path))
    assert outcome.startswith("IngestError") and "compressed with bzip2" in outcome, outcome
    assert added < 32  # the 64 MB was never unpacked


def test_a_word_body_is_counted_as_it_unpacks_and_parsed_a_paragraph_at_a_time(tmp_path: Path) -> None:
    """4 MB of empty paragraphs (60 KB packed) made a 63 MB ElementTree; streamed, each is let
    go once read, and past the unpacked limit the file is refused."""
    path = deflated(tmp_path / "empty.docx", {"word/document.xml": empty_paragraphs(4)})
    outcome, added = bounded(read(path, max_unpacked_mb=16), memory_mb=48)
    assert outcome == "[]" and added < 24, (outcome, added)
    outcome, added = bounded(read(path, max_unpacked_mb=2), memory_mb=48)
    assert "past ingest.max_unpacked_mb (2 MB unpacked)" in outcome and added < 24, (outcome, added)


def test_an_epubs_chapters_share_one_unpacked_limit(tmp_path: Path) -> None:
    """Five chapters each under the limit, together over it."""
    members = epub_members({f"c{n}.xhtml": repeated(b"word ", 5) for n in range(5)})
    path = deflated(tmp_path / "chapters.epub", members)
    outcome, _ = bounded(read(path, max_unpacked_mb=16))
    assert "unpacking c3.xhtml takes it past ingest.max_unpacked_mb (16 MB unpacked)" in outcome, outcome


def test_every_member_of_a_pptx_is_checked_before_python_pptx_reads_them(tmp_path: Path) -> None:
    """python-pptx reads every member whole, a picture too; crag's limit reaches them all."""
    pptx = pytest.importorskip("pptx")  # the office extra
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text, slide.placeholders[1].text = "Greeting", "Hello"
    deck.save(tmp_path / "good.pptx")
    path = tmp_path / "big.pptx"
    path.write_bytes((tmp_path / "good.pptx").read_bytes())
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive, archive.open("ppt/media/image9.bin", "w") as member:
        for piece in repeated(b"\0", 24):
            member.write(piece)
    outcome, _ = bounded(read(path, max_unpacked_mb=16))
    assert "unpacking ppt/media/image9.bin takes it past ingest.max_unpacked_mb" in outcome, outcome
    assert "Hello" in bounded(read(tmp_path / "good.pptx", max_unpacked_mb=16))[0]


# --- files refused by what stat says -------------------------------------------------------------


def test_a_sparse_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "holes.txt"
    with path.open("wb") as file:
        file.truncate(64 * MB)  # no disk, 64 MB long
    outcome, added = bounded(read(path))
    assert "is a sparse file (64 MB long, 0 bytes on disk)" in outcome and added < 16, (outcome, added)


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_bytes(b"word " * (MB // 2))  # 2.5 MB
    with pytest.raises(IngestError, match=r"big.txt is 2 MB, over ingest.max_file_mb \(1 MB\)"):
        list(read_documents(path, limits=ReadLimits(max_file_mb=1)))


def test_text_past_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "long.md"
    path.write_text("A sentence of words.\n\n" * 60_000, encoding="utf-8")  # 1.3 million characters
    with pytest.raises(IngestError, match=r"over 1 million characters of text \(ingest.max_text_mb\)"):
        list(read_documents(path, limits=ReadLimits(max_text_mb=1)))


# --- links and special files in a folder ---------------------------------------------------------


@pytest.fixture
def linked(tmp_path: Path) -> Path:
    """docs/ with a good file, a link to a secret outside it, a link to a folder outside it,
    a link to its own good file, a link to itself, and a named pipe."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("root:x:0:0 secret", encoding="utf-8")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("The lamp runs for ten hours.", encoding="utf-8")
    (docs / "passwd.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    (docs / "elsewhere").symlink_to(tmp_path / "outside")
    (docs / "again.md").symlink_to(docs / "good.md")
    (docs / "loop").symlink_to(docs)  # a folder inside, itself: walked once at most
    os.mkfifo(docs / "pipe.txt")
    return docs


def test_links_in_a_folder_are_not_followed_and_each_gets_a_line(linked: Path) -> None:
    from crag.ingestion.readers import gather_files

    files, passed, _ = gather_files([linked])
    assert files == [linked / "good.md"]
    assert sorted(line.split(" is ")[0] for line in passed) == [
        str(linked / n) for n in ("again.md", "elsewhere", "loop", "passwd.txt", "pipe.txt")]
    assert any("passwd.txt is a link (to a file" in line for line in passed)
    assert any("pipe.txt is a named pipe, not a regular file" in line for line in passed)


def test_links_inside_the_folder_may_be_followed(linked: Path) -> None:
    from crag.ingestion.readers import gather_files

    files, passed, _ = gather_files([linked], symlinks="inside")
    assert files == [linked / "again.md"]  # good.md through its link: read once
    assert sorted(line.split(" is ")[0] for line in passed) == [
        str(linked / n) for n in ("elsewhere", "passwd.txt", "pipe.txt")]
    assert any("passwd.txt is a link out of" in line for line in passed)


def test_a_linked_secret_is_not_indexed(linked: Path, tmp_path: Path) -> None:
    report = ingest([linked], tmp_path / "index")
    assert report.files_read == 1 and len(report.skipped) == 5
    assert not any("secret" in n.get_content() for n in ChunkIndex.load(tmp_path / "index").nodes)


def test_a_file_swapped_for_a_link_after_the_walk_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crag.ingestion import pipeline

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("The lamp runs for ten hours.", encoding="utf-8")
    (docs / "notes.md").write_text("Nothing here yet.", encoding="utf-8")
    (tmp_path / "shadow").write_text("root:$6$secret-hash:19000:0:99999:7:::", encoding="utf-8")
    walk = pipeline.gather_files

    def walk_then_swap(*args: object, **kwargs: object) -> tuple[list[Path], list[str], list[str]]:
        found = walk(*args, **kwargs)
        (docs / "notes.md").unlink()
        (docs / "notes.md").symlink_to(tmp_path / "shadow")
        return found

    monkeypatch.setattr(pipeline, "gather_files", walk_then_swap)
    report = ingest([docs], tmp_path / "index")
    assert report.files_read == 1
    assert report.skipped == [f"{docs / 'notes.md'} became a link after the folder was read; not followed. Left out."]
    assert not any("secret" in n.get_content() for n in ChunkIndex.load(tmp_path / "index").nodes)


def test_a_file_whose_folder_is_swapped_for_a_link_after_the_walk_is_not_read(tmp_path: Path) -> None:
    from crag.ingestion.readers import gather_files
    from crag.ingestion.worker import FileReader

    docs = tmp_path / "docs"
    (docs / "team").mkdir(parents=True)
    (docs / "team" / "notes.md").write_text("Nothing here yet.", encoding="utf-8")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "notes.md").write_text("root secret", encoding="utf-8")
    [found], _, _ = gather_files([docs])
    (docs / "team").rename(docs / "old")
    (docs / "team").symlink_to(tmp_path / "etc")  # notes.md itself is no link: the folder above it is
    with FileReader() as reader, pytest.raises(IngestError, match="is no longer the file found when the folder"):
        reader.read(found)


def test_a_link_named_on_the_command_line_is_read_as_named(tmp_path: Path) -> None:
    (tmp_path / "real.md").write_text("The lamp runs for ten hours.", encoding="utf-8")
    (tmp_path / "link.md").symlink_to(tmp_path / "real.md")
    assert ingest([tmp_path / "link.md"], tmp_path / "index").files_read == 1


# --- time and memory: the reader's process is stopped, the ingest goes on ------------------------


def test_a_reader_past_its_time_is_stopped_and_the_next_file_is_read(tmp_path: Path) -> None:
    from crag.ingestion.worker import FileReader

    (tmp_path / "slow.pdf").write_bytes(slow_pdf())
    (tmp_path / "good.md").write_text("The lamp runs for ten hours.", encoding="utf-8")
    with FileReader(ReadLimits(max_seconds=1)) as reader:
        with pytest.raises(IngestError, match=r"slow.pdf: reading it took over 1 s \(ingest.max_seconds\)"):
            reader.read(tmp_path / "slow.pdf")
        documents, _ = reader.read(tmp_path / "good.md")
    assert [d.text for d in documents] == ["The lamp runs for ten hours."]


def test_a_reader_past_its_memory_is_stopped_and_the_next_file_is_read(tmp_path: Path) -> None:
    from crag.ingestion.worker import FileReader

    (tmp_path / "big.txt").write_bytes(b"word " * (8 * MB))  # 40 MB: its bytes and its text
    (tmp_path / "good.md").write_text("The lamp runs for ten hours.", encoding="utf-8")
    with FileReader(ReadLimits(max_memory_mb=24, max_text_mb=100)) as reader:
        with pytest.raises(IngestError, match=r"big.txt: reading it needs more than ingest.max_memory_mb \(24 MB\)"):
            reader.read(tmp_path / "big.txt")
        documents, _ = reader.read(tmp_path / "good.md")
    assert [d.text for d in documents] == ["The lamp runs for ten hours."]


# --- all of them at once, through the command ---------------------------------------------------


def hostile_folder(folder: Path, outside: Path) -> None:
    """Every hostile file of issue 32, and two good ones."""
    folder.mkdir()
    bzip2_bomb(folder / "bomb.docx", "word/document.xml", {"[Content_Types].xml": b"<Types/>"})
    bzip2_bomb(folder / "bomb.epub", "META-INF/container.xml", {"mimetype": b"application/epub+zip"})
    bzip2_bomb(folder / "bomb.pptx", "ppt/presentation.xml", {"[Content_Types].xml": b"<Types/>"})
    deflated(folder / "paragraphs.docx", {"word/document.xml": empty_paragraphs(210)})
    deflated(folder / "chapters.epub", epub_members(
        {f"c{n}.xhtml": repeated(b"word ", 60) for n in range(5)}))  # 300 MB in all
    (folder / "slow.pdf").write_bytes(slow_pdf())
    with (folder / "holes.txt").open("wb") as file:
        file.truncate(3 * 1024 * MB)
    os.mkfifo(folder / "pipe.md")
    outside.write_text("root:x:0:0 secret", encoding="utf-8")
    (folder / "passwd.txt").symlink_to(outside)
    (folder / "lamp.md").write_text("# Lamp\n\nThe Helio lamp runs for ten hours on one charge.", encoding="utf-8")
    (folder / "warranty.docx").write_bytes(docx_bytes(["Lumen gives a three-year warranty on the Helio."]))


@pytest.mark.slow
def test_a_folder_of_hostile_files_ingests_in_one_command_within_the_limits(tmp_path: Path) -> None:
    folder, index = tmp_path / "docs", tmp_path / "index"
    (tmp_path / "first").mkdir()
    (tmp_path / "first" / "note.md").write_text("The first note says the sky is blue.", encoding="utf-8")
    ingest([tmp_path / "first"], index)
    before = {p: p.read_bytes() for p in index.rglob("*") if p.is_file() and p.name != "CURRENT"}
    hostile_folder(folder, tmp_path / "secret.txt")
    (tmp_path / "crag.toml").write_text("[ingest]\nmax_seconds = 5\n", encoding="utf-8")
    crag = [sys.executable, "-c", "import sys; from crag.app.cli import main; sys.exit(main())"]
    command = [*crag, "--config", str(tmp_path / "crag.toml"), "ingest", str(folder), "--index", str(index), "-q"]
    # The command runs under a probe that reads its peak memory, and its reader's, back from
    # RUSAGE_CHILDREN; the address-space cap stops a runaway reader, not the machine.
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stderr, end='')")
    cap = 6 * 1024 * MB
    done = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True,
                          check=False, timeout=900,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
    status, peak_kb = done.stdout.splitlines()[0].split()
    lines = done.stdout.splitlines()[1:]
    assert status == "3", done.stdout + done.stderr
    assert int(peak_kb) < 1024 * 1024, f"peak {int(peak_kb) // 1024} MB"
    named = sorted(Path(line.split(": ", 2)[2].split(" ")[0].rstrip(":")).name for line in lines)
    assert named == ["bomb.docx", "bomb.epub", "bomb.pptx", "chapters.epub", "holes.txt", "paragraphs.docx",
                     "passwd.txt", "pipe.md", "slow.pdf"], lines
    assert all(p.read_bytes() == data for p, data in before.items())  # the earlier version is untouched
    texts = " ".join(n.get_content() for n in ChunkIndex.load(index).nodes)
    assert "secret" not in texts and "sky is blue" in texts
    settings = Settings.load(env={}, index={"path": index}, web_search={"kind": "none"})
    workflow = build_workflow(settings)
    assert "ten hours" in workflow.ask("How long does the Helio lamp run on one charge?").answer
    assert "three-year" in workflow.ask("What warranty does Lumen give on the Helio?").answer
