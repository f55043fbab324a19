"""The on-disk index: chunks, their embeddings and lexical statistics, and incremental ingest.

Layout of an index folder:
    nodes.jsonl       one llama-index TextNode per line
    embeddings.npy    float32, one unit-length row per node, same order
    manifest.json     per source file: size, mtime, hash and the documents it held;
                      and the chunker that cut them
    summaries.json    optional: a summary per document id (retriever kind "summary")

Writes are atomic: a new version is written beside the old one and swapped in by
rename, so a failed or interrupted ingest leaves the previous index usable.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from llama_index.core.node_parser import NodeParser, SentenceSplitter
from llama_index.core.schema import Document, TextNode

from crag.errors import ConfigError, IndexNotFoundError, IngestError
from crag.models import WordLlamaEmbedding
from crag.readers import find_files, read_documents
from crag.text import TermStats

FORMAT_VERSION = 1


@dataclass
class ChunkIndex:
    """Chunks with their embeddings; BM25 and IDF statistics are derived on load."""

    nodes: list[TextNode]
    embeddings: np.ndarray
    manifest: dict[str, dict] = field(default_factory=dict)
    chunker: str = ""  # the node parser's signature; a different one re-chunks every file
    summaries: dict[str, str] = field(default_factory=dict)  # document id -> summary

    def __post_init__(self) -> None:
        self._stats: TermStats | None = None
        self._bm25 = None

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def term_stats(self) -> TermStats:
        """IDF statistics of the chunks, shared by the grader, refiner and rewriter."""
        if self._stats is None:
            self._stats = TermStats.from_texts(n.get_content() for n in self.nodes)
        return self._stats

    @property
    def bm25(self):  # noqa: ANN201 - bm25s has no stubs
        if self._bm25 is None:
            from crag.steps.bm25 import BM25

            self._bm25 = BM25([n.get_content() for n in self.nodes])
        return self._bm25

    @classmethod
    def empty(cls) -> ChunkIndex:
        return cls(nodes=[], embeddings=np.zeros((0, 256), dtype=np.float32))

    @classmethod
    def load(cls, path: str | Path) -> ChunkIndex:
        path = Path(path)
        _recover(path)
        if path.exists() and not path.is_dir():
            raise IndexNotFoundError(f"{path} is a file, not a crag index folder; pass the folder with --index.")
        if not (path / "nodes.jsonl").exists():
            raise IndexNotFoundError(
                f"No crag index at {path}. Build one first: crag ingest YOUR_DOCS --index {path}"
            )
        rebuild = f"remove the folder and build it again: crag ingest YOUR_DOCS --index {path}"
        try:
            nodes = _read_nodes(path / "nodes.jsonl")
            embeddings = _read_embeddings(path / "embeddings.npy")
            manifest, chunker = _read_manifest(path / "manifest.json")
            summaries = _read_summaries(path / "summaries.json")
        except ValueError as exc:
            raise IndexNotFoundError(f"The index at {path} is unreadable ({exc}); {rebuild}") from None
        problem = _embedding_problem(embeddings, len(nodes))
        if problem:
            raise IndexNotFoundError(f"The index at {path} is inconsistent ({problem}); {rebuild}")
        return cls(
            nodes=nodes,
            embeddings=embeddings.astype(np.float32, copy=False),
            manifest=manifest,
            chunker=chunker,
            summaries=summaries,
        )

    def save(self, path: str | Path) -> None:
        """Write atomically: into a sibling folder, then swap it in by rename.

        Refuses to replace anything that is not a crag index (a file, or a folder of
        other things), since the old version is deleted once the new one is in place.
        """
        path = Path(path)
        _check_replaceable(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp, old = _sibling(path, "tmp"), _sibling(path, "old")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        with open(tmp / "nodes.jsonl", "w", encoding="utf-8") as f:
            for node in self.nodes:
                f.write(json.dumps(node.to_dict(), ensure_ascii=False) + "\n")
        with open(tmp / "embeddings.npy", "wb") as f:
            np.save(f, self.embeddings)
        manifest = {"format": FORMAT_VERSION, "chunker": self.chunker, "files": self.manifest}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        written = ["nodes.jsonl", "embeddings.npy", "manifest.json"]
        if self.summaries:
            (tmp / "summaries.json").write_text(json.dumps(self.summaries, ensure_ascii=False), encoding="utf-8")
            written.append("summaries.json")
        for name in written:
            with open(tmp / name, "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(tmp)
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            path.rename(old)
        tmp.rename(path)
        _fsync_dir(path.parent)  # the renames themselves survive a power cut
        shutil.rmtree(old, ignore_errors=True)


EMBEDDING_DIM = 256
INDEX_FILES = ("nodes.jsonl", "embeddings.npy", "manifest.json", "summaries.json")


def _read_nodes(file: Path) -> list[TextNode]:
    """The chunks in nodes.jsonl; ValueError naming the file and line when it is damaged."""
    nodes = []
    try:
        with open(file, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    raise ValueError(f"nodes.jsonl line {number} is not valid JSON; the file may be cut short") from None
                if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                    raise ValueError(f"nodes.jsonl line {number} is not a chunk")
                try:
                    nodes.append(TextNode.from_dict(record))
                except (ValueError, TypeError, KeyError, AttributeError):
                    raise ValueError(f"nodes.jsonl line {number} is not a chunk") from None
    except UnicodeDecodeError:
        raise ValueError("nodes.jsonl is not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(f"nodes.jsonl: {exc.strerror or exc}") from None
    return nodes


def _read_embeddings(file: Path) -> np.ndarray:
    try:
        return np.load(file, allow_pickle=False)
    except FileNotFoundError:
        raise ValueError("embeddings.npy is missing") from None
    except OSError as exc:
        raise ValueError(f"embeddings.npy: {exc.strerror or exc}") from None
    except Exception:  # noqa: BLE001 - a damaged header raises ValueError, EOFError, TokenError, SyntaxError...
        raise ValueError("embeddings.npy is not a NumPy array file") from None


def _read_manifest(file: Path) -> tuple[dict[str, dict], str]:
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError("manifest.json is missing") from None
    except OSError as exc:
        raise ValueError(f"manifest.json: {exc.strerror or exc}") from None
    except ValueError:  # also UnicodeDecodeError
        raise ValueError("manifest.json is not valid JSON") from None
    files = manifest.get("files", {}) if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        raise ValueError("manifest.json is not crag's manifest")
    return files, str(manifest.get("chunker", ""))


def _read_summaries(file: Path) -> dict[str, str]:
    if not file.exists():
        return {}
    try:
        summaries = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ValueError("summaries.json is not valid JSON") from None
    if not isinstance(summaries, dict) or not all(isinstance(v, str) for v in summaries.values()):
        raise ValueError("summaries.json is not crag's summaries")
    return summaries


def _embedding_problem(embeddings: np.ndarray, count: int) -> str | None:
    if embeddings.ndim != 2 or embeddings.shape[1:] != (EMBEDDING_DIM,):
        return f"embeddings have shape {embeddings.shape}, expected (chunks, {EMBEDDING_DIM})"
    if not np.issubdtype(embeddings.dtype, np.number):
        return f"embeddings are {embeddings.dtype}, not numbers"
    if embeddings.shape[0] != count:
        return f"{count} chunks but {embeddings.shape[0]} embeddings"
    return None


def _check_replaceable(path: Path) -> None:
    if not path.exists():
        return
    if not path.is_dir():
        raise IngestError(f"{path} is a file, not an index folder; choose another --index.")
    strangers = [p.name for p in path.iterdir() if p.name not in INDEX_FILES]
    if strangers and not (path / "nodes.jsonl").exists():
        raise IngestError(
            f"{path} is a folder of other things ({', '.join(sorted(strangers)[:3])}...), not a crag index; "
            "crag replaces its index folder when it writes, so choose an empty or new --index folder."
        )


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # not possible on every platform (Windows)
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _sibling(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.{tag}")


def _recover(path: Path) -> None:
    """Finish a swap that was interrupted between its two renames."""
    old = _sibling(path, "old")
    if not path.exists() and old.exists():
        old.rename(path)


@dataclass
class IngestReport:
    files_read: int = 0
    files_unchanged: int = 0
    documents: int = 0
    chunks_added: int = 0
    chunks_total: int = 0


ProgressCallback = Callable[[str, int, int], None]
Summarizer = Callable[[list[Document]], dict[str, str]]
"""`summarize(documents)`: a summary per document id, for the documents given."""
"""`progress(stage, done, total)`: stage "read" counts files (unchanged ones too), "embed" chunks;
each stage starts with done=0."""


def ingest(
    paths: list[str | Path],
    index_dir: str | Path,
    *,
    embed_model: WordLlamaEmbedding | None = None,
    chunk_size: int = 256,
    chunk_overlap: int = 32,
    progress: ProgressCallback | None = None,
    node_parser: NodeParser | None = None,
    chunker: str | None = None,
    summarize: Summarizer | None = None,
) -> IngestReport:
    """Add files to the index at `index_dir`, re-reading only files that changed.

    A file whose size, modification time and content hash match the manifest is
    skipped entirely; a changed file replaces every chunk it produced before.

    `node_parser` cuts documents into chunks (default: a `SentenceSplitter` of
    `chunk_size` tokens) and `chunker` names it; when the name differs from the one
    the index was built with, every file is chunked again. `summarize`, when given,
    writes a summary of each new document into the index.
    """
    index_dir = Path(index_dir)
    if chunk_overlap >= chunk_size:
        raise ConfigError(
            f"index.chunk_overlap ({chunk_overlap}) must be smaller than index.chunk_size ({chunk_size})."
        )
    try:
        index = ChunkIndex.load(index_dir)
    except IndexNotFoundError:
        if (index_dir / "nodes.jsonl").exists() or index_dir.is_file():
            raise
        index = ChunkIndex.empty()
    _check_replaceable(index_dir)  # before the work, not after it
    if node_parser is None:
        node_parser = SentenceSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    chunker = chunker or f"sentence:{chunk_size}:{chunk_overlap}"
    files = find_files([Path(p) for p in paths])
    if len(index) and index.chunker != chunker:
        # Chunks cut two ways would not mix: cut every file again, those ingested before too.
        earlier = [Path(k) for k in index.manifest if Path(k).is_file()]
        files = list({f.resolve(): f for f in [*earlier, *files]}.values())
        index = ChunkIndex.empty()
    if not files:
        raise IngestError(f"No .txt, .md, .html or .jsonl files found in {', '.join(map(str, paths))}.")

    report = IngestReport()
    changed: dict[str, dict] = {}
    documents: list[Document] = []
    if progress:
        progress("read", 0, len(files))
    for number, file in enumerate(files, start=1):
        key = str(file.resolve())
        stat = file.stat()
        entry = index.manifest.get(key)
        if entry and entry["size"] == stat.st_size and entry["mtime_ns"] == stat.st_mtime_ns:
            report.files_unchanged += 1
            if progress:
                progress("read", number, len(files))
            continue
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        if entry and entry["sha256"] == digest:  # touched, not changed
            report.files_unchanged += 1
            if progress:
                progress("read", number, len(files))
            continue
        docs = list(read_documents(file))
        for doc in docs:
            doc.metadata["file"] = key
            # The splitter subtracts the metadata text it would embed from each chunk's
            # budget; the file's path must not count, or where the corpus lives changes
            # the chunk boundaries (and every retrieval result after them).
            doc.excluded_embed_metadata_keys = ["file", "doc_id"]
            doc.excluded_llm_metadata_keys = ["file", "doc_id"]
        documents.extend(docs)
        changed[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
        report.files_read += 1
        if progress:
            progress("read", number, len(files))

    report.documents = len(documents)
    if not changed:
        report.chunks_total = len(index)
        return report

    new_nodes = node_parser.get_nodes_from_documents(documents)
    for node in new_nodes:
        node.metadata["doc_id"] = node.ref_doc_id
        # Extend, not replace: a parser's own hidden keys (a sentence window) stay hidden.
        node.excluded_embed_metadata_keys = sorted({*node.excluded_embed_metadata_keys, "file", "doc_id"})
        node.excluded_llm_metadata_keys = sorted({*node.excluded_llm_metadata_keys, "file", "doc_id"})
    embed_model = embed_model or WordLlamaEmbedding()
    vectors = _embed(embed_model, [n.get_content() for n in new_nodes], progress)

    keep = [i for i, n in enumerate(index.nodes) if n.metadata.get("file") not in changed]
    # A document id seen again in a changed file replaces its old chunks, wherever they came from.
    new_doc_ids = {d.doc_id for d in documents}
    keep = [i for i in keep if index.nodes[i].ref_doc_id not in new_doc_ids]
    kept_nodes = [index.nodes[i] for i in keep]
    summaries = {}
    if summarize is not None:
        kept_docs = {n.ref_doc_id for n in kept_nodes}
        summaries = {d: s for d, s in index.summaries.items() if d in kept_docs}
        summaries.update(summarize(documents))
    merged = ChunkIndex(
        nodes=kept_nodes + new_nodes,
        embeddings=np.vstack([index.embeddings[keep], vectors]).astype(np.float32),
        manifest={**index.manifest, **changed},
        chunker=chunker,
        summaries=summaries,
    )
    if not merged.nodes:
        names = ", ".join(Path(k).name for k in list(changed)[:3]) + ("..." if len(changed) > 3 else "")
        raise IngestError(f"No text to index in {names}: the files are empty or only whitespace.")
    merged.save(index_dir)
    report.chunks_added = len(new_nodes)
    report.chunks_total = len(merged)
    return report


def _embed(model: WordLlamaEmbedding, texts: list[str], progress: ProgressCallback | None) -> np.ndarray:
    batch = 256
    parts = []
    if progress:
        progress("embed", 0, len(texts))
    for start in range(0, len(texts), batch):
        parts.append(model.embed_many(texts[start : start + batch]))
        if progress:
            progress("embed", min(start + batch, len(texts)), len(texts))
    return np.vstack(parts) if parts else np.zeros((0, 256), dtype=np.float32)
