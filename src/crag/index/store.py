"""The on-disk index: chunks, their embeddings and lexical statistics, in atomic versions.

Layout of an index folder (format 2):
    CURRENT           the name of the live version folder, replaced atomically by each ingest
    .lock             held by the one ingest writing the folder (`writer_lock`)
    v7/               one version, never changed once written:
      manifest.json     format, chunk count, chunker, per source file: size, mtime, hash
                        and documents; where the vectors are searched
      nodes.jsonl       one llama-index TextNode per line
      offsets.npy       int64 byte offset of each line (and the end): a chunk is one read
      embeddings.npy    float32, one unit-length row per chunk, memory-mapped and searched
                        exactly (or mirrored to a Chroma server: `crag.index.vectors`)
      lexical/          each chunk's term ids, document frequencies, BM25 (`crag.index.lexical`)
      documents.json    each document's chunk positions (document-summary retrieval)
      summaries.json    optional: a summary per document id (retriever kind "summary")

A question only opens files: the embeddings, BM25 matrix and frequencies are memory-mapped and
a chunk is parsed when it is retrieved, so opening costs the same at 1k chunks as at 100k.
An ingest writes a new version beside the live one, inside the folder (so the folder may be a
mount point or a symlink), then points CURRENT at it; a failed or interrupted ingest leaves
the previous version live. The version before the live one is kept for readers that opened
it just before the switch.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from llama_index.core.schema import TextNode

from crag.errors import IndexNotFoundError, IngestError
from crag.index.layout import (
    CHECKED_FILES,
    EMBEDDING_DIM,
    FORMAT_VERSION,
    POINTER,
    VERSION_NAME,
    OldIndexFormatError,
    check_index_folder,
    consistency_problem,
    fsync_tree,
    live_version,
    point_to,
    read_array,
    read_manifest,
    read_summaries,
    reason,
    recorded_chunker,
    remove_stale,
    sha256,
    write_failure,
    writer_lock,
)
from crag.index.lexical import BM25, ChunkTerms, LexicalIndex
from crag.index.node_file import NodeFile, write_nodes
from crag.index.server_vectors import open_server_store, write_server_vectors
from crag.index.vectors import ChromaStore, VectorStoreOptions
from crag.text import TermStats

__all__ = ["POINTER", "ChunkIndex", "NodeFile", "OldIndexFormatError", "check_index_folder", "load_format1",
           "recorded_chunker", "writer_lock"]


@dataclass
class ChunkIndex:
    """Chunks with their embeddings and lexical statistics.

    Loaded from a folder (`load`), everything is read on demand; built in memory (a list of
    nodes and an array), BM25 and the statistics are computed from the texts when first used.
    """

    nodes: Sequence[TextNode]
    embeddings: np.ndarray
    manifest: dict[str, dict] = field(default_factory=dict)
    chunker: str = ""  # the node parser's signature; a different one re-chunks every file
    summaries: dict[str, str] = field(default_factory=dict)  # document id -> summary
    store_options: VectorStoreOptions = field(default_factory=VectorStoreOptions)
    vectors: dict = field(default_factory=dict)  # the manifest's record of the vector store

    def __post_init__(self) -> None:
        self.path: Path | None = None  # the index folder
        self.version: Path | None = None  # the version folder this was loaded from
        self._lexical: LexicalIndex | None = None
        self._terms: ChunkTerms | None = None
        self._stats: TermStats | None = None
        self._bm25: BM25 | None = None
        self._store: ChromaStore | None = None
        self._positions: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def term_stats(self) -> TermStats:
        """IDF statistics of the chunks, shared by the grader, refiner and rewriter."""
        if self._stats is None:
            self._stats = self._lexical.stats if self._lexical else self.chunk_terms().stats()
        return self._stats

    @property
    def bm25(self) -> BM25:
        if self._bm25 is None:
            self._bm25 = self._lexical.bm25 if self._lexical else self.chunk_terms().bm25()
        return self._bm25

    def chunk_terms(self) -> ChunkTerms:
        """Each chunk's term ids: read from the version, or analyzed from the texts in memory."""
        if self._terms is None:
            if self.version is not None:
                self._terms = ChunkTerms.load(self.version / "lexical")
            else:
                self._terms = ChunkTerms.from_texts(n.get_content() for n in self.nodes)
        return self._terms

    def verify(self) -> None:
        """Check the version's files against the checksums ingest wrote (reads them whole).

        Raises:
            IndexNotFoundError: a file was changed or damaged since it was written.
        """
        if self.version is None:
            return
        recorded = read_manifest(self.version / "manifest.json").get("sha256", {})
        for name in CHECKED_FILES:
            if recorded.get(name) != sha256(self.version / name):
                raise IndexNotFoundError.damaged(self.path, f"is damaged ({name} does not match its checksum)")

    def document_positions(self) -> dict[str, list[int]]:
        """Each document's chunk positions, in order (written at ingest; read without the chunks)."""
        if self.version is not None and (self.version / "documents.json").exists():
            try:
                return json.loads((self.version / "documents.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                raise IndexNotFoundError.damaged(self.path, "is unreadable (documents.json)") from None
        return positions_by_document(self.nodes)

    def in_memory(self) -> ChunkIndex:
        """A copy held wholly in memory (chunks, embeddings, term ids), free of the folder."""
        copy = ChunkIndex(nodes=list(self.nodes), embeddings=np.array(self.embeddings, np.float32),
                          manifest=self.manifest, chunker=self.chunker, summaries=dict(self.summaries))
        copy._terms = self.chunk_terms()
        self.close()
        return copy

    def warm_up(self) -> None:
        """Open and page in what a question reads, so the first question pays for none of it."""
        self.term_stats, self.bm25  # noqa: B018 - loaded by the properties
        if len(self.nodes):
            self.vector_search(np.zeros(EMBEDDING_DIM, np.float32), 1)
            self.nodes[0]

    def vector_search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Positions of the `k` chunks nearest `vector` (inner product), best first.

        Exact, over the (memory-mapped) embeddings; an index whose vectors live on a Chroma
        server is searched there.
        """
        if not len(self.nodes) or k <= 0:
            return []
        if self.vectors.get("kind") == "server" and self.path is not None:
            return self._server_search(vector, k)
        sims = self.embeddings @ np.asarray(vector, np.float32)
        depth = min(k, len(sims))
        best = np.argpartition(-sims, depth - 1)[:depth]
        return [(int(i), float(sims[i])) for i in best[np.argsort(-sims[best], kind="stable")]]

    def _server_search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        if self._store is None:
            self._store = open_server_store(self.path, self.vectors, self.store_options)
            self._positions = {n.node_id: i for i, n in enumerate(self.nodes)}
        hits = self._store.query(vector, min(k, len(self.nodes)))  # the store holds every chunk
        # A chunk id the index does not hold cannot come back, but would be a KeyError if it did.
        return [(self._positions[i], s) for i, s in hits if i in self._positions]

    def close(self) -> None:
        """Release open files and a server connection; using the index opens them again."""
        if isinstance(self.nodes, NodeFile):
            self.nodes.close()
        if self._store is not None:
            self._store.close()
            self._store = None

    @classmethod
    def empty(cls) -> ChunkIndex:
        return cls(nodes=[], embeddings=np.zeros((0, EMBEDDING_DIM), dtype=np.float32))

    @classmethod
    def load(cls, path: str | Path, store_options: VectorStoreOptions | None = None) -> ChunkIndex:
        """The live version of the index at `path`; `store_options` reach a server store.

        Reads no chunk: only the manifest, and maps the arrays. Writes nothing, so a
        read-only index folder serves questions.
        """
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise IndexNotFoundError(f"{path} is a file, not a crag index folder; pass the folder with --index.")
        version = live_version(path)
        try:
            manifest = read_manifest(version / "manifest.json")
            embeddings = read_array(version / "embeddings.npy")
            nodes = NodeFile(version, path)
            summaries = read_summaries(version / "summaries.json")
            lexical_count = len(read_array(version / "lexical" / "terms.indptr.npy")) - 1
        except (ValueError, OSError, EOFError, TypeError) as exc:
            raise IndexNotFoundError.damaged(path, f"is unreadable ({reason(exc)})") from None
        problem = consistency_problem(version, manifest, embeddings, len(nodes), lexical_count)
        if problem:
            raise IndexNotFoundError.damaged(path, f"is inconsistent ({problem})")
        index = cls(
            nodes=nodes,
            embeddings=embeddings,
            manifest=manifest["files"],
            chunker=str(manifest.get("chunker", "")),
            summaries=summaries,
            store_options=store_options or VectorStoreOptions(),
            vectors=manifest.get("vectors") or {},
        )
        index.path, index.version = path, version
        index._lexical = LexicalIndex(version / "lexical", path)
        return index

    def save(self, path: str | Path, terms: ChunkTerms | None = None) -> None:
        """Write a new version of the index at `path` and make it the live one.

        `terms` are the chunks' term ids when the caller has them (an incremental ingest);
        otherwise the texts are analyzed. The caller holds `writer_lock(path)`.
        """
        path = Path(path)
        check_index_folder(path)
        path.mkdir(parents=True, exist_ok=True)
        number = 1 + max((int(m.group(1)) for p in path.iterdir() if (m := VERSION_NAME.fullmatch(p.name))), default=0)
        tmp = path / f".v{number}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            tmp.mkdir()
            write_nodes(self.nodes, tmp)
            with open(tmp / "embeddings.npy", "wb") as f:
                np.save(f, np.asarray(self.embeddings, dtype=np.float32))
            (terms or self.chunk_terms()).save(tmp / "lexical")
            vectors = {"kind": "embedded"}
            if self.store_options.kind == "server":
                vectors = write_server_vectors(self.nodes, self.embeddings, self.vectors, self.store_options, path)
            manifest = {"format": FORMAT_VERSION, "chunks": len(self.nodes), "chunker": self.chunker,
                        "files": self.manifest, "vectors": vectors,
                        "sha256": {name: sha256(tmp / name) for name in CHECKED_FILES}}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
            documents = positions_by_document(self.nodes)
            (tmp / "documents.json").write_text(json.dumps(documents, ensure_ascii=False), encoding="utf-8")
            if self.summaries:
                (tmp / "summaries.json").write_text(json.dumps(self.summaries, ensure_ascii=False), encoding="utf-8")
            fsync_tree(tmp)
            tmp.rename(path / f"v{number}")
            point_to(path, f"v{number}")
        except OSError as exc:
            raise IngestError(write_failure(path, exc)) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # what a write that failed left (renamed: gone)
        remove_stale(path, keep={f"v{number}", f"v{number - 1}"}, store=self.store_options)
        self.close()
        self.vectors, self.path, self.version = vectors, path, path / f"v{number}"


def load_format1(path: Path) -> ChunkIndex:
    """An index written by crag 0.1 (flat files, format 1), read whole into memory to upgrade it."""
    try:
        nodes = [TextNode.from_dict(json.loads(line)) for line in
                 (path / "nodes.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
        embeddings = read_array(path / "embeddings.npy")
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        summaries = read_summaries(path / "summaries.json")
    except (ValueError, OSError, TypeError, KeyError, AttributeError) as exc:
        raise IndexNotFoundError.damaged(path, f"is unreadable ({reason(exc)})") from None
    if embeddings.shape != (len(nodes), EMBEDDING_DIM):
        raise IndexNotFoundError.damaged(path, "is inconsistent")
    index = ChunkIndex(nodes=nodes, embeddings=np.asarray(embeddings, np.float32),
                       manifest=manifest.get("files", {}), chunker=str(manifest.get("chunker", "")),
                       summaries=summaries)
    vectors = manifest.get("vectors") or {}
    if vectors.get("kind") == "server":  # its server generation goes on from there
        index.vectors = vectors
    return index


def positions_by_document(nodes: Sequence[TextNode]) -> dict[str, list[int]]:
    positions: dict[str, list[int]] = {}
    for position, node in enumerate(nodes):
        positions.setdefault(node.ref_doc_id or node.node_id, []).append(position)
    return positions


