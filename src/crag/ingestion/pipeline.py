"""Incremental ingest: read changed files, cut them into chunks, embed them, write a new index version."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from llama_index.core.node_parser import NodeParser, SentenceSplitter
from llama_index.core.schema import Document
from llama_index.core.utils import get_tokenizer

from crag.errors import ConfigError, IndexNotFoundError, IngestError
from crag.index import VectorStoreOptions
from crag.index.lexical import ChunkTerms
from crag.index.store import (
    POINTER,
    ChunkIndex,
    OldIndexFormatError,
    check_index_folder,
    load_format1,
    writer_lock,
)
from crag.ingestion.batches import NewChunks, SummaryFailed
from crag.ingestion.chunk_metadata import HIDDEN_KEYS, METADATA_SHARE, fit_metadata, hide
from crag.ingestion.cleaning import clean
from crag.ingestion.custom import Reader, UserReader, load_readers
from crag.ingestion.files import ReadLimits, file_digest
from crag.ingestion.formats.records import RECORD_SUFFIXES, RecordsRead, stream_records
from crag.ingestion.given import fingerprint, manifest_key, prepare, shown_id
from crag.ingestion.readers import KINDS, PARAGRAPH_LIMIT, bounded_paragraphs, gather_files
from crag.ingestion.spilled import Chained, SpilledNodes
from crag.ingestion.worker import FileReader, failure
from crag.models import WordLlamaEmbedding
from crag.trace import file_id


@dataclass
class IngestReport:
    """What one ingest did: files read, unchanged, skipped and empty (each of the last two with
    its one-line reason); `documents` counts the documents read (from files, or given and
    changed). A .jsonl, .csv or .tsv file read with some records left out counts as read, with
    a line in `skipped` naming them (`files_partly_read` counts those files). An empty file (no
    text once read) is not counted as read, nor recorded as ingested: the next ingest reads it
    again. `not_read` has a line per type found that crag does not read: said, not skipped."""

    files_read: int = 0
    files_unchanged: int = 0
    documents: int = 0
    documents_unchanged: int = 0  # given documents whose text and place the index already holds
    chunks_added: int = 0
    chunks_total: int = 0
    skipped: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    files_partly_read: int = 0  # read, with records left out: each has its line in `skipped`
    not_read: list[str] = field(default_factory=list)  # a line per type crag does not read ("3 .zip files")

    @property
    def files_skipped(self) -> int:
        return len(self.skipped) - self.files_partly_read

    @property
    def files_empty(self) -> int:
        return len(self.empty)


DEFAULT_INDEX = Path(".crag/index")  # where `crag ingest` writes without a crag.toml


ProgressCallback = Callable[[str, int, int], None]
"""`progress(stage, done, total)`: stage "read" counts files (unchanged ones too), "ocr" the
scanned pages of the file being read (the `ocr` extra), "embed" chunks; each stage starts with
done=0 (stage "ocr" once for each file it reads)."""
Summarizer = Callable[[list[Document]], dict[str, str]]
"""`summarize(documents)`: a summary per document id, for the documents given."""


def ingest(
    paths: Sequence[str | Path] | None = None,
    index_dir: str | Path = DEFAULT_INDEX,
    *,
    documents: Iterable[Document] | None = None,
    readers: Mapping[str, str | UserReader] | None = None,
    embed_model: WordLlamaEmbedding | None = None,
    chunk_size: int = 256,
    chunk_overlap: int = 32,
    progress: ProgressCallback | None = None,
    node_parser: NodeParser | None = None,
    chunker: str | None = None,
    summarize: Summarizer | None = None,
    vector_store: VectorStoreOptions | None = None,
    limits: ReadLimits | None = None,
) -> IngestReport:
    """Add files, and llama-index `documents`, to the index at `index_dir`, re-reading only
    files that changed.

    A file whose size, modification time and content hash match the manifest is
    skipped entirely; a changed file replaces every chunk it produced before. A file that
    cannot be read (encrypted, damaged, not text) is left out with its reason in
    `IngestReport.skipped`, and the others are ingested; only when no file could be read or
    was already indexed does the ingest fail (`IngestError`), leaving the index as it was.

    `node_parser` cuts documents into chunks (default: a `SentenceSplitter` of
    `chunk_size` tokens) and `chunker` names it; when the name differs from the one
    the index was built with, every file is chunked again. `summarize`, when given,
    writes a summary of each new document into the index. `vector_store`
    (`crag.index.VectorStoreOptions`) says where the vectors are searched (default: exactly,
    over the index's own embeddings).

    One ingest at a time writes an index folder: a second one fails at once (`IngestError`).
    An index written by an earlier crag (format 1) is upgraded, even when no file changed.

    `documents` (from SimpleDirectoryReader or a LlamaHub reader) go in beside the files:
    their `page_label` is cited as the page and `file_name` (or `file_path`) as the file, and
    one whose id, text and place the index already holds is not embedded again. Their ids
    must be stable across runs (SimpleDirectoryReader: `filename_as_id=True`).

    `readers` maps more suffixes to readers ("module:function", or the function itself),
    which take a file's Path and give Documents or text; a target that cannot be imported
    is a `ConfigError` before anything is read.

    `limits` (`crag.ingestion.files.ReadLimits`; `crag ingest` passes the `[ingest]` settings'
    values) say which links in a folder are followed and bound
    each file's read: its size, what it unpacks to, its text, its time and its memory (the
    built-in readers run in a child process, `crag.ingestion.worker`). A file past one is
    skipped with its reason.
    """
    if not paths and documents is None:
        raise IngestError("Nothing to ingest: give paths, or documents=[...].")
    index_dir = Path(index_dir)
    if chunk_overlap >= chunk_size:
        raise ConfigError(
            f"index.chunk_overlap ({chunk_overlap}) must be smaller than index.chunk_size ({chunk_size})."
        )
    extra = load_readers(readers or {})
    limits = limits or ReadLimits()
    check_index_folder(index_dir)  # before the work, not after it
    created = not index_dir.exists()
    try:
        with writer_lock(index_dir), FileReader(limits, extra) as reader, closing(SpilledNodes(index_dir)) as spill:
            return _ingest(list(paths or []), index_dir, given=documents, readers=extra, reader=reader, spill=spill,
                           embed_model=embed_model, chunk_size=chunk_size,
                           chunk_overlap=chunk_overlap, progress=progress, node_parser=node_parser,
                           chunker=chunker, summarize=summarize, vector_store=vector_store)
    finally:
        if created and [p.name for p in index_dir.iterdir()] == [".lock"]:  # nothing was written
            (index_dir / ".lock").unlink(missing_ok=True)
            index_dir.rmdir()


def _ingest(
    paths: list[str | Path],
    index_dir: Path,
    *,
    given: Iterable[Document] | None,
    readers: dict[str, Reader],
    reader: FileReader,
    spill: SpilledNodes,
    embed_model: WordLlamaEmbedding | None,
    chunk_size: int,
    chunk_overlap: int,
    progress: ProgressCallback | None,
    node_parser: NodeParser | None,
    chunker: str | None,
    summarize: Summarizer | None,
    vector_store: VectorStoreOptions | None,
) -> IngestReport:
    upgrade = False
    try:
        index = ChunkIndex.load(index_dir, vector_store)
        index.verify()  # a damaged index is named here, not carried into the next version
    except OldIndexFormatError:
        index, upgrade = load_format1(index_dir), True
    except IndexNotFoundError:
        if (index_dir / POINTER).exists() or index_dir.is_file():
            raise
        index = ChunkIndex.empty()
    if node_parser is None:
        node_parser = SentenceSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    chunker = chunker or f"sentence:{chunk_size}:{chunk_overlap}"
    files, passed_over, not_read = gather_files([Path(p) for p in paths], readers, reader.limits.symlinks)
    given_documents, given_skipped = prepare(given or [])  # before anything is read: a bad one fails the call
    if len(index) and index.chunker != chunker:
        # Chunks cut two ways would not mix: cut every file again, those ingested before too.
        earlier = [Path(k) for k in index.manifest if Path(k).is_file()]
        files = list({f.resolve(): f for f in [*earlier, *files]}.values())
        live_vectors = index.vectors
        index = ChunkIndex.empty()
        # The new version still starts from the live store: a server's next generation, not
        # generation 1 again (which may be the live collection, written under the old index).
        index.vectors = live_vectors
    if not files and given is None:
        if passed_over:
            raise IngestError(_nothing_read(passed_over))
        kinds = KINDS if not readers else f"{KINDS.replace(' or ', ', ')}, {', '.join(readers)}"
        raise IngestError(f"No {kinds} files found in {', '.join(map(str, paths))}.")

    report = IngestReport(skipped=[*passed_over, *given_skipped], not_read=not_read)
    unsummarized: set[str] = set()  # files with a document lacking a summary, when summaries are asked for
    if summarize is not None:
        unsummarized = {file_id(n.metadata.get("file") or "") for n in index.nodes
                        if n.ref_doc_id not in index.summaries}
    changed: dict[str, dict] = {}
    emptied: set[str] = set()  # files ingested before that now give no text: their chunks go
    empty_names: list[str] = []
    room = int(getattr(node_parser, "chunk_size", chunk_size) * METADATA_SHARE)
    tokens = get_tokenizer()
    new = NewChunks(node_parser, lambda: embed_model or WordLlamaEmbedding(),
                    lambda: index.chunk_terms() if len(index) else ChunkTerms.empty(), spill, progress, summarize)
    if progress:
        progress("read", 0, len(files))
    for number, file in enumerate(files, start=1):
        key = str(file.resolve())
        stat = file.stat()
        entry = None if file_id(key) in unsummarized else index.manifest.get(key)  # re-read: to summarize it
        if entry and entry["size"] == stat.st_size and entry["mtime_ns"] == stat.st_mtime_ns:
            report.files_unchanged += 1
            if progress:
                progress("read", number, len(files))
            continue
        mark = None
        try:
            digest = file_digest(file, reader.limits)  # a piece at a time, refused by type and size first
            if entry and entry["sha256"] == digest:  # touched, not changed
                report.files_unchanged += 1
                if progress:
                    progress("read", number, len(files))
                continue
            if file.suffix.lower() in RECORD_SUFFIXES and file.suffix.lower() not in readers:
                found, mark = RecordsRead(), new.mark()  # read as it is cut: a failure drops what it added
                records = map(_as_read, stream_records(file, reader.limits, found))
                added = new.add(_prepared(records, key, room, tokens))
                digest = found.sha256
                if not added and found.left_out:  # no record read: the file is left out, as one that cannot be
                    raise IngestError(f"{file}:{found.left_out[0][0]}: {found.left_out[0][1]}.")
                if (line := found.line(file)) is not None:
                    report.skipped.append(line)
                    report.files_partly_read += 1
            else:
                pages_read = (lambda done, total: progress("ocr", done, total)) if progress else None
                docs, digest = reader.read(file, pages_read)  # bounded in time and memory
                added = new.add(_prepared(docs, key, room, tokens))
        except SummaryFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - this file is left out, with its line; the others still go in
            # Records stream and every file is chunked here, in the ingest's own process: a
            # failure of one file (a reader's bug, a chunker's) must not end the folder.
            if mark is not None:
                new.drop_since(mark)
            report.skipped.append(failure(file, exc, reader.limits)[1])
            if progress:
                progress("read", number, len(files))
            continue
        if not added:  # said, and not recorded: a file must never count as read and give nothing
            report.empty.append(f"{file} has no text to index (empty, only whitespace, or its text is "
                                "in images); not recorded, so the next ingest reads it again.")
            empty_names.append(file.name)
            if key in index.manifest:
                emptied.add(key)
            if progress:
                progress("read", number, len(files))
            continue
        report.documents += added
        changed[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
        report.files_read += 1
        if progress:
            progress("read", number, len(files))

    for doc in given_documents:
        key, entry = manifest_key(doc.doc_id), fingerprint(doc)
        old = None if file_id(key) in unsummarized else index.manifest.get(key)
        if old and old.get("sha256") == entry["sha256"]:
            report.documents_unchanged += 1
            continue
        doc.metadata["file"] = file_id(key)  # its chunks are replaced when it changes, as a file's are
        doc.id_ = shown_id(doc.doc_id)  # answers show it; the manifest's key keeps the given id
        hide(doc, HIDDEN_KEYS)
        fit_metadata(doc, room, tokens)
        report.documents += new.add([doc])
        changed[key] = entry

    if not changed and not report.files_unchanged and not report.documents_unchanged:
        if report.skipped:
            raise IngestError(_nothing_read(report.skipped + report.empty))
        if report.empty:
            names = ", ".join(empty_names[:3]) + ("..." if len(empty_names) > 3 else "")
            raise IngestError(f"No text to index in {names}: the files are empty or only whitespace.")
    if not changed and not emptied:
        if upgrade:
            index.store_options = vector_store or VectorStoreOptions()
            index.save(index_dir)
        report.chunks_total = len(index)
        return report

    new.flush()
    # A document id seen again in a changed file replaces its old chunks, wherever they came from.
    new_doc_ids = new.doc_ids
    gone = {file_id(key) for key in changed.keys() | emptied}
    old_nodes = list(index.nodes)  # parsed once: an incremental ingest reads the old chunks
    keep = [i for i, n in enumerate(old_nodes)
            if file_id(n.metadata.get("file") or "") not in gone and n.ref_doc_id not in new_doc_ids]
    kept_nodes = [old_nodes[i] for i in keep]
    del old_nodes
    # Summaries of unchanged documents stay; those of changed ones are stale.
    kept_docs = {n.ref_doc_id for n in kept_nodes}
    summaries = {d: s for d, s in index.summaries.items() if d in kept_docs}
    summaries.update(new.summaries)
    new_nodes, vectors = new.nodes, new.vectors()
    rows = np.concatenate([np.asarray(keep, np.int64), len(index) + np.arange(len(new_nodes))])
    merged = ChunkIndex(
        nodes=Chained(kept_nodes, new_nodes),
        embeddings=np.concatenate([np.asarray(index.embeddings[keep], np.float32), vectors]),
        manifest={k: v for k, v in {**index.manifest, **changed}.items() if k not in emptied},
        chunker=chunker,
        summaries=summaries,
        store_options=vector_store or VectorStoreOptions(),
        vectors=index.vectors,  # the live store, which the new version starts from
    )
    if not merged.nodes:
        names = ", ".join(Path(k).name for k in list(changed)[:3]) + ("..." if len(changed) > 3 else "")
        raise IngestError(f"No text to index in {names}: the files are empty or only whitespace.")
    # Only the new chunks were analyzed, as they were cut; the kept ones' terms are read back.
    merged.save(index_dir, terms=new.terms.select(rows))
    report.chunks_added = len(new_nodes)
    report.chunks_total = len(merged)
    return report


def _prepared(documents: Iterable[Document], key: str, room: int, tokens: Callable[[str], list]) -> Iterator[Document]:
    """A file's documents as the index keeps them: its id, and metadata that leaves a chunk room."""
    for doc in documents:
        # The file's id, not its path: a chunk's metadata reaches events and replies. The
        # manifest keeps the path (`key`), to find the file again; the id is its hash.
        doc.metadata["file"] = file_id(key)
        # The splitter subtracts the metadata text it would embed from each chunk's budget; the
        # file's path must not count, or where the corpus lives changes the chunk boundaries
        # (and every retrieval result after them); nor may a long value crowd the text out.
        hide(doc, HIDDEN_KEYS)
        fit_metadata(doc, room, tokens)
        yield doc


def _as_read(document: Document) -> Document:
    """A record as `read_documents` gives every document: cleaned, its paragraphs bounded."""
    clean(document)
    if len(document.text) > PARAGRAPH_LIMIT:
        document.set_content(bounded_paragraphs(document.text))
    return document


def _nothing_read(skipped: list[str]) -> str:
    """One line for an ingest where every file was skipped: the reason itself, for one file."""
    if len(skipped) == 1:
        return skipped[0]
    return f"None of the {len(skipped)} files could be read: " + " | ".join(skipped)

