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

import fcntl
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.schema import TextNode

from crag.config import VectorStoreSettings
from crag.errors import ConfigError, IndexNotFoundError, IngestError
from crag.index.lexical import BM25, ChunkTerms, LexicalIndex
from crag.index.vectors import ChromaStore, client_for
from crag.text import TermStats

FORMAT_VERSION = 2
EMBEDDING_DIM = 256
POINTER = "CURRENT"
_VERSION = re.compile(r"v(\d+)")
_OWN = re.compile(r"(CURRENT|\.lock|v\d+|\.v\d+\.tmp-\w+|\.CURRENT\.tmp-\w+)")


class OldIndexFormatError(IndexNotFoundError):
    """The index was written by an earlier crag; `crag ingest` upgrades it."""


class NodeFile(Sequence[TextNode]):
    """The chunks of one version, each parsed from its own line when it is asked for."""

    def __init__(self, folder: Path, index: Path) -> None:
        self._file = folder / "nodes.jsonl"
        self._offsets = _read_array(folder / "offsets.npy")
        self._index = index  # the index folder, named in errors
        self._fd: int | None = None

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, position: int) -> TextNode:  # type: ignore[override]
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]  # type: ignore[return-value]
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(position)
        if self._fd is None:
            self._fd = os.open(self._file, os.O_RDONLY)
        start, end = int(self._offsets[position]), int(self._offsets[position + 1])
        return self._parse(os.pread(self._fd, end - start, start), position)

    def __iter__(self) -> Iterator[TextNode]:
        with open(self._file, "rb") as f:
            for position in range(len(self)):
                yield self._parse(f.readline(), position)

    def _parse(self, line: bytes, position: int) -> TextNode:
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ValueError
            return TextNode.from_dict(record)
        except (ValueError, TypeError, KeyError, AttributeError):  # also UnicodeDecodeError
            problem = f"is unreadable (nodes.jsonl line {position + 1} is not a chunk)"
            raise IndexNotFoundError.damaged(self._index, problem) from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
    store_settings: VectorStoreSettings = field(default_factory=VectorStoreSettings)
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
        recorded = _read_manifest(self.version / "manifest.json").get("sha256", {})
        for name in CHECKED_FILES:
            if recorded.get(name) != _sha256(self.version / name):
                raise IndexNotFoundError.damaged(self.path, f"is damaged ({name} does not match its checksum)")

    def document_positions(self) -> dict[str, list[int]]:
        """Each document's chunk positions, in order (written at ingest; read without the chunks)."""
        if self.version is not None and (self.version / "documents.json").exists():
            try:
                return json.loads((self.version / "documents.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                raise IndexNotFoundError.damaged(self.path, "is unreadable (documents.json)") from None
        return _positions_by_document(self.nodes)

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
            self._store = _open_server_store(self.path, self.vectors, self.store_settings)
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
    def load(cls, path: str | Path, store_settings: VectorStoreSettings | None = None) -> ChunkIndex:
        """The live version of the index at `path`; `store_settings` reach a server store.

        Reads no chunk: only the manifest, and maps the arrays. Writes nothing, so a
        read-only index folder serves questions.
        """
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise IndexNotFoundError(f"{path} is a file, not a crag index folder; pass the folder with --index.")
        version = _live_version(path)
        try:
            manifest = _read_manifest(version / "manifest.json")
            embeddings = _read_array(version / "embeddings.npy")
            nodes = NodeFile(version, path)
            summaries = _read_summaries(version / "summaries.json")
            lexical_count = len(_read_array(version / "lexical" / "terms.indptr.npy")) - 1
        except (ValueError, OSError, EOFError, TypeError) as exc:
            raise IndexNotFoundError.damaged(path, f"is unreadable ({_reason(exc)})") from None
        problem = _consistency_problem(version, manifest, embeddings, len(nodes), lexical_count)
        if problem:
            raise IndexNotFoundError.damaged(path, f"is inconsistent ({problem})")
        index = cls(
            nodes=nodes,
            embeddings=embeddings,
            manifest=manifest["files"],
            chunker=str(manifest.get("chunker", "")),
            summaries=summaries,
            store_settings=store_settings or VectorStoreSettings(),
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
        number = 1 + max((int(m.group(1)) for p in path.iterdir() if (m := _VERSION.fullmatch(p.name))), default=0)
        tmp = path / f".v{number}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            tmp.mkdir()
            _write_nodes(self.nodes, tmp)
            with open(tmp / "embeddings.npy", "wb") as f:
                np.save(f, np.asarray(self.embeddings, dtype=np.float32))
            (terms or self.chunk_terms()).save(tmp / "lexical")
            vectors = _write_server_vectors(self, path) if self.store_settings.kind == "server" else {"kind": "embedded"}
            manifest = {"format": FORMAT_VERSION, "chunks": len(self.nodes), "chunker": self.chunker,
                        "files": self.manifest, "vectors": vectors,
                        "sha256": {name: _sha256(tmp / name) for name in CHECKED_FILES}}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
            documents = _positions_by_document(self.nodes)
            (tmp / "documents.json").write_text(json.dumps(documents, ensure_ascii=False), encoding="utf-8")
            if self.summaries:
                (tmp / "summaries.json").write_text(json.dumps(self.summaries, ensure_ascii=False), encoding="utf-8")
            _fsync_tree(tmp)
            tmp.rename(path / f"v{number}")
            _point_to(path, f"v{number}")
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise IngestError(_write_failure(path, exc)) from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _remove_stale(path, keep={f"v{number}", f"v{number - 1}"}, settings=self.store_settings)
        self.close()
        self.vectors, self.path, self.version = vectors, path, path / f"v{number}"


CHECKED_FILES = ("nodes.jsonl", "offsets.npy", "embeddings.npy",
                 "lexical/terms.ids.npy", "lexical/terms.indptr.npy", "lexical/vocab.json")


def _sha256(file: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(file, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def recorded_chunker(path: Path) -> str:
    """The chunker signature the index at `path` was cut with ("" when there is no readable index)."""
    try:
        return str(_read_manifest(_live_version(path) / "manifest.json").get("chunker", ""))
    except (IndexNotFoundError, ValueError, OSError):
        return ""


def check_index_folder(path: Path) -> None:
    """Refuse to write into a file, or into a folder of other things that is not a crag index."""
    if not path.exists():
        return
    if not path.is_dir():
        raise IngestError(f"{path} is a file, not a crag index folder; choose another --index.")
    strangers = [p.name for p in path.iterdir() if not _OWN.fullmatch(p.name) and p.name not in _FORMAT1_FILES]
    if strangers and not (path / POINTER).exists() and not (path / "nodes.jsonl").exists():
        raise IngestError(
            f"{path} is a folder of other things ({', '.join(sorted(strangers)[:3])}...), not a crag index; "
            "choose an empty or new --index folder."
        )


@contextmanager
def writer_lock(path: Path) -> Iterator[None]:
    """Hold the index's write lock: one ingest at a time writes a folder; a second one fails."""
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise IngestError(
                f"Another crag ingest is writing the index at {path}; run this again when it has finished."
            ) from None
        yield
    finally:
        os.close(fd)  # closing releases the lock


def load_format1(path: Path) -> ChunkIndex:
    """An index written by crag 0.1 (flat files, format 1), read whole into memory to upgrade it."""
    try:
        nodes = [TextNode.from_dict(json.loads(line)) for line in
                 (path / "nodes.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
        embeddings = _read_array(path / "embeddings.npy")
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        summaries = _read_summaries(path / "summaries.json")
    except (ValueError, OSError, TypeError, KeyError, AttributeError) as exc:
        raise IndexNotFoundError.damaged(path, f"is unreadable ({_reason(exc)})") from None
    if embeddings.shape != (len(nodes), EMBEDDING_DIM):
        raise IndexNotFoundError.damaged(path, "is inconsistent")
    index = ChunkIndex(nodes=nodes, embeddings=np.asarray(embeddings, np.float32),
                       manifest=manifest.get("files", {}), chunker=str(manifest.get("chunker", "")),
                       summaries=summaries)
    vectors = manifest.get("vectors") or {}
    if vectors.get("kind") == "server":  # its server generation goes on from there
        index.vectors = vectors
    return index


_FORMAT1_FILES = ("nodes.jsonl", "embeddings.npy", "manifest.json", "summaries.json", "vectors")


def _live_version(path: Path) -> Path:
    pointer = path / POINTER
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        if (path / "nodes.jsonl").exists():
            raise OldIndexFormatError(
                f"The index at {path} was written by an earlier crag (index format 1). Upgrade it once "
                f"with: crag ingest YOUR_DOCS --index {path} (unchanged files are not read or embedded again)."
            ) from None
        raise IndexNotFoundError(
            f"No crag index at {path}. Build one first: crag ingest YOUR_DOCS --index {path}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise IndexNotFoundError.damaged(path, f"is unreadable ({_reason(exc)})") from None
    if not _VERSION.fullmatch(name) or not (path / name).is_dir():
        raise IndexNotFoundError.damaged(path, f"is damaged ({POINTER} names no version)")
    return path / name


def _read_manifest(file: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError("manifest.json is missing") from None
    except ValueError:  # also UnicodeDecodeError
        raise ValueError("manifest.json is not valid JSON") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise ValueError("manifest.json is not crag's manifest")
    if manifest.get("format") != FORMAT_VERSION:
        raise ValueError(f"manifest.json has index format {manifest.get('format')!r}; this crag reads {FORMAT_VERSION}")
    vectors = manifest.get("vectors") or {}
    if not isinstance(vectors, dict) or (vectors.get("kind") == "server" and not isinstance(vectors.get("collection"), str)):
        raise ValueError("manifest.json's vector store record is damaged")
    return manifest


def _read_array(file: Path) -> np.ndarray:
    """A memory-mapped .npy; ValueError naming the file when it is missing or damaged."""
    try:
        return np.load(file, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise ValueError(f"{file.name} is missing") from None
    except OSError:
        raise
    except Exception:  # noqa: BLE001 - a damaged header raises ValueError, EOFError, TokenError, SyntaxError...
        raise ValueError(f"{file.name} is not a NumPy array file") from None


def _read_summaries(file: Path) -> dict[str, str]:
    if not file.exists():
        return {}
    try:
        summaries = json.loads(file.read_text(encoding="utf-8"))
    except ValueError:
        raise ValueError("summaries.json is not valid JSON") from None
    if not isinstance(summaries, dict) or not all(isinstance(v, str) for v in summaries.values()):
        raise ValueError("summaries.json is not crag's summaries")
    return summaries


def _consistency_problem(version: Path, manifest: dict, embeddings: np.ndarray, nodes: int, lexical: int) -> str | None:
    """What disagrees among the manifest, chunks, embeddings and lexical statistics, if anything."""
    if embeddings.ndim != 2 or embeddings.shape[1:] != (EMBEDDING_DIM,) or embeddings.dtype != np.float32:
        return f"embeddings are {embeddings.dtype} {embeddings.shape}, expected float32 (chunks, {EMBEDDING_DIM})"
    counts = {"manifest": manifest.get("chunks"), "chunks": nodes, "embeddings": embeddings.shape[0], "lexical": lexical}
    if len(set(counts.values())) > 1:
        return ", ".join(f"{k} {v}" for k, v in counts.items())
    offsets = _read_array(version / "offsets.npy")
    if offsets.ndim != 1 or offsets.dtype != np.int64 or not len(offsets) or int(offsets[0]) != 0 \
            or np.any(np.diff(offsets) <= 0):
        return "offsets.npy is damaged"
    if (version / "nodes.jsonl").stat().st_size != int(offsets[-1]):
        return "nodes.jsonl is not the length its offsets say"
    return None


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _positions_by_document(nodes: Sequence[TextNode]) -> dict[str, list[int]]:
    positions: dict[str, list[int]] = {}
    for position, node in enumerate(nodes):
        positions.setdefault(node.ref_doc_id or node.node_id, []).append(position)
    return positions


def _write_nodes(nodes: Sequence[TextNode], folder: Path) -> None:
    offsets = np.zeros(len(nodes) + 1, dtype=np.int64)
    with open(folder / "nodes.jsonl", "wb") as f:
        for position, node in enumerate(nodes):
            line = (json.dumps(node.to_dict(), ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
            f.write(line)
            offsets[position + 1] = offsets[position] + len(line)
    np.save(folder / "offsets.npy", offsets)


def _write_server_vectors(index: ChunkIndex, path: Path) -> dict:
    """Every vector into a new server collection; the old one stays live until the switch."""
    settings = index.store_settings
    generation = int(index.vectors.get("generation", 0)) + 1
    name = f"{settings.collection}-{generation}"
    store = ChromaStore(client_for(settings, path), name, create=True)
    try:
        ids = [n.node_id for n in index.nodes]
        stored = store.ids()
        store.delete([i for i in stored if i not in set(ids)])  # left by an interrupted ingest
        missing = [p for p, i in enumerate(ids) if i not in stored]
        store.add([ids[p] for p in missing], [index.nodes[p].ref_doc_id or "" for p in missing],
                  np.asarray(index.embeddings[missing], np.float32))
    finally:
        store.close()
    return {"kind": "server", "collection": name, "count": len(ids), "generation": generation}


def _open_server_store(path: Path, vectors: dict, settings: VectorStoreSettings) -> ChromaStore:
    if settings.kind != "server":
        raise ConfigError(
            f"The index at {path} keeps its vectors on a Chroma server (collection "
            f"{vectors.get('collection')!r}); set [vector_store] kind = \"server\" and its uri."
        )
    try:
        return ChromaStore(client_for(settings, path), vectors["collection"])
    except (ConfigError, IndexNotFoundError):
        raise
    except Exception as exc:  # noqa: BLE001 - chromadb raises NotFoundError, ValueError, OSError...
        raise IndexNotFoundError(
            f"The Chroma collection of the index at {path} is unreadable ({exc}); "
            f"build it again: crag ingest YOUR_DOCS --index {path}"
        ) from None


def _point_to(path: Path, name: str) -> None:
    tmp = path / f".{POINTER}.tmp-{uuid.uuid4().hex[:12]}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path / POINTER)
    _fsync_dir(path)


def _remove_stale(path: Path, keep: set[str], settings: VectorStoreSettings) -> None:
    """Older versions, interrupted writes and a format-1 index's files (under the write lock)."""
    for entry in path.iterdir():
        stale_version = _VERSION.fullmatch(entry.name) and entry.name not in keep
        if stale_version and settings.kind == "server":
            _drop_collection(settings, path, entry / "manifest.json")
        if stale_version or ".tmp-" in entry.name or entry.name in _FORMAT1_FILES:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def _drop_collection(settings: VectorStoreSettings, path: Path, manifest: Path) -> None:
    try:
        name = json.loads(manifest.read_text(encoding="utf-8"))["vectors"]["collection"]
        client = client_for(settings, path)
    except Exception:  # noqa: BLE001 - no record, or no server: nothing to clean up
        return
    try:
        client.delete_collection(name)
    except Exception:  # noqa: BLE001 - already gone
        pass


def _write_failure(path: Path, exc: OSError) -> str:
    import errno

    if exc.errno == errno.ENOSPC:
        return f"The disk holding {path} is full; free some space and run the ingest again (the index is unchanged)."
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"Cannot write the index at {path} ({exc.strerror}); choose a writable --index (the index is unchanged)."
    return f"Cannot write the index at {path} ({exc.strerror or exc}); the index is unchanged."


def _fsync_tree(folder: Path) -> None:
    for file in folder.rglob("*"):
        if file.is_file():
            with open(file, "rb") as f:
                os.fsync(f.fileno())
    for sub in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
        _fsync_dir(sub)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # not possible on every platform
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
