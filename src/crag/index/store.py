"""The on-disk index: chunks, their embeddings and lexical statistics, and incremental ingest.

Layout of an index folder:
    nodes.jsonl       one llama-index TextNode per line
    embeddings.npy    float32, one unit-length row per node, same order
    manifest.json     per source file: size, mtime, hash and the documents it held;
                      the chunker that cut them; where the vectors are searched
    vectors/          the embedded Chroma store of the embeddings (`crag.index.vectors`);
                      with a Chroma server, the manifest names the collection instead
    summaries.json    optional: a summary per document id (retriever kind "summary")

Writes are atomic: a new version is written beside the old one and swapped in by
rename, so a failed or interrupted ingest leaves the previous index usable. embeddings.npy
stays the record of the vectors: a server collection is filled from it, and an index
written before the vector store existed is searched from it in memory.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from llama_index.core.schema import TextNode

from crag.config import VectorStoreSettings
from crag.errors import ConfigError, IndexNotFoundError, IngestError
from crag.text import TermStats
from crag.index.vectors import STORE_FOLDER, ChromaStore, client_for

FORMAT_VERSION = 1


@dataclass
class ChunkIndex:
    """Chunks with their embeddings; BM25 and IDF statistics are derived on load."""

    nodes: list[TextNode]
    embeddings: np.ndarray
    manifest: dict[str, dict] = field(default_factory=dict)
    chunker: str = ""  # the node parser's signature; a different one re-chunks every file
    summaries: dict[str, str] = field(default_factory=dict)  # document id -> summary
    store_settings: VectorStoreSettings = field(default_factory=VectorStoreSettings)
    vectors: dict = field(default_factory=dict)  # the manifest's record of the vector store

    def __post_init__(self) -> None:
        self._stats: TermStats | None = None
        self._bm25 = None
        self._store: ChromaStore | None = None
        self._positions: dict[str, int] | None = None
        self.path: Path | None = None

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
            from crag.index.lexical import BM25

            self._bm25 = BM25([n.get_content() for n in self.nodes])
        return self._bm25

    def vector_search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Positions of the `k` chunks nearest `vector` (inner product), best first.

        Searched in the vector store the index was written with; an index that has none
        (written in memory, or before the store existed) is searched exactly in memory.
        """
        if not len(self.nodes) or k <= 0:
            return []
        if not self.vectors or self.path is None:
            sims = self.embeddings @ vector
            depth = min(k, len(sims))
            best = np.argpartition(-sims, depth - 1)[:depth]
            return [(int(i), float(sims[i])) for i in best[np.argsort(-sims[best], kind="stable")]]
        if self._store is None:
            self._store = _open_store(self.path, self.vectors, self.store_settings)
            self._positions = {n.node_id: i for i, n in enumerate(self.nodes)}
        hits = self._store.query(vector, min(k, len(self.nodes)))  # the store holds every chunk
        # A chunk id the index does not hold cannot come back, but would be a KeyError if it did.
        return [(self._positions[i], s) for i, s in hits if i in self._positions]

    def close(self) -> None:
        """Release the vector store (an embedded one's files); searching opens it again."""
        if self._store is not None:
            self._store.close()
            self._store = None

    @classmethod
    def empty(cls) -> ChunkIndex:
        return cls(nodes=[], embeddings=np.zeros((0, 256), dtype=np.float32))

    @classmethod
    def load(cls, path: str | Path, store_settings: VectorStoreSettings | None = None) -> ChunkIndex:
        """The index at `path`; `store_settings` reach a server store (its uri and token)."""
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
            manifest, chunker, vectors = _read_manifest(path / "manifest.json")
            summaries = _read_summaries(path / "summaries.json")
        except ValueError as exc:
            raise IndexNotFoundError(f"The index at {path} is unreadable ({exc}); {rebuild}") from None
        problem = _embedding_problem(embeddings, len(nodes))
        if problem:
            raise IndexNotFoundError(f"The index at {path} is inconsistent ({problem}); {rebuild}")
        index = cls(
            nodes=nodes,
            embeddings=embeddings.astype(np.float32, copy=False),
            manifest=manifest,
            chunker=chunker,
            summaries=summaries,
            store_settings=store_settings or VectorStoreSettings(),
            vectors=vectors,
        )
        index.path = path
        return index

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
        vectors = _write_vectors(self, tmp, path)
        manifest = {"format": FORMAT_VERSION, "chunker": self.chunker, "files": self.manifest, "vectors": vectors}
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
        if self.vectors.get("kind") == "server" and self.vectors.get("collection") != vectors["collection"]:
            _drop_collection(self.store_settings, path, self.vectors["collection"])
        self.close()
        self.vectors, self.path, self._positions = vectors, path, None


EMBEDDING_DIM = 256
INDEX_FILES = ("nodes.jsonl", "embeddings.npy", "manifest.json", "summaries.json", STORE_FOLDER)


def _open_store(path: Path, vectors: dict, settings: VectorStoreSettings) -> ChromaStore:
    if vectors.get("kind") == "server" and settings.kind != "server":
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
            f"The vector store of the index at {path} is unreadable ({exc}); "
            f"remove the folder and build it again: crag ingest YOUR_DOCS --index {path}"
        ) from None


def _write_vectors(index: ChunkIndex, tmp: Path, path: Path) -> dict:
    """Put the index's vectors where its settings say; the manifest's record of them.

    Embedded: the live store is copied into the new version and brought up to date there
    (removed chunks deleted, new ones added), so ingest cost follows the change, not the
    index. Server: a new collection holds every vector; the old one stays live until the swap.
    """
    settings = index.store_settings
    ids = [n.node_id for n in index.nodes]
    if settings.kind == "embedded":
        name = "chunks"
        if index.vectors.get("kind") == "embedded" and (path / STORE_FOLDER).is_dir():
            shutil.copytree(path / STORE_FOLDER, tmp / STORE_FOLDER)
    else:
        generation = int(index.vectors.get("generation", 0)) + 1
        name = f"{settings.collection}-{generation}"
    store = ChromaStore(client_for(settings, tmp), name, create=True)
    try:
        stored = store.ids()
        wanted = set(ids)
        store.delete([i for i in stored if i not in wanted])
        missing = [p for p, i in enumerate(ids) if i not in stored]
        store.add([ids[p] for p in missing], [index.nodes[p].ref_doc_id or "" for p in missing],
                  index.embeddings[missing])
    finally:
        store.close()
    record = {"kind": settings.kind, "collection": name, "count": len(ids)}
    if settings.kind == "server":
        record["generation"] = generation
    return record


def _drop_collection(settings: VectorStoreSettings, path: Path, name: str) -> None:
    client = client_for(settings, path)
    try:
        client.delete_collection(name)
    except Exception:  # noqa: BLE001 - already gone: nothing to clean up
        pass
    finally:
        client.close()


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


def _read_manifest(file: Path) -> tuple[dict[str, dict], str, dict]:
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
    vectors = manifest.get("vectors") or {}
    if not isinstance(vectors, dict) or (vectors and not isinstance(vectors.get("collection"), str)):
        raise ValueError("manifest.json's vector store record is damaged")
    return files, str(manifest.get("chunker", "")), vectors


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
