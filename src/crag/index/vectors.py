"""Chunk vectors on a Chroma server, for indexes shared by several machines.

By default an index searches its own embeddings exactly (`crag.index.store`): at 100k chunks a
query takes a few milliseconds and needs no server. `[vector_store] kind = "server"` mirrors
the vectors to a Chroma server at `uri` (install `crag-workflows[chroma]`, the thin HTTP
client): each ingest writes a new collection (`<collection>-<generation>`), the version's
manifest names it, and collections of removed versions are dropped, so an interrupted ingest
leaves the old collection, and the old index, in use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlparse

import numpy as np
from pydantic import SecretStr

from crag.errors import ConfigError, IndexNotFoundError

_ADD_BATCH = 5000  # Chroma's own limit on one add is a little above this
# HNSW search depth: Chroma's default (10) misses a third of the exact top 5 on 256-d vectors.
_HNSW = {"space": "ip", "ef_construction": 100, "ef_search": 200, "max_neighbors": 16}


@dataclass(frozen=True)
class VectorStoreOptions:
    """Where an index's vectors are searched (`crag.toml`'s `[vector_store]` gives these; its
    defaults are the same).

    Args:
        kind: "embedded", exactly over the index's own embeddings, no server; or "server", a
            Chroma server at `uri`.
        uri: the Chroma server's URL, e.g. http://host:8000.
        token: a bearer token for the server (text is wrapped in a `SecretStr`), kept out of
            reprs and logs.
        collection: the prefix of the server's collection names; one per index version.
    """

    kind: Literal["embedded", "server"] = "embedded"
    uri: str | None = None
    token: SecretStr | None = field(default=None, repr=False)
    collection: str = "crag"

    def __post_init__(self) -> None:
        if isinstance(self.token, str):
            object.__setattr__(self, "token", SecretStr(self.token))


class VectorStore(Protocol):
    """Vectors of chunks by chunk id, with the id of the document each came from."""

    def add(self, ids: Sequence[str], doc_ids: Sequence[str], vectors: np.ndarray) -> None: ...

    def delete(self, ids: Sequence[str]) -> None: ...

    def ids(self) -> set[str]: ...

    def query(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The `k` nearest chunk ids with their inner product, best first."""
        ...


class ChromaStore:
    """One Chroma collection; the client is embedded or HTTP, the calls are the same."""

    def __init__(self, client: Any, name: str, *, create: bool = False) -> None:
        self.client = client
        self.name = name
        if create:
            # No embedding function: crag embeds; Chroma's default would fetch an ONNX model.
            self.collection = client.get_or_create_collection(
                name, embedding_function=None, configuration={"hnsw": _HNSW}
            )
        else:
            self.collection = client.get_collection(name, embedding_function=None)

    def add(self, ids: Sequence[str], doc_ids: Sequence[str], vectors: np.ndarray) -> None:
        for start in range(0, len(ids), _ADD_BATCH):
            end = start + _ADD_BATCH
            self.collection.add(
                ids=list(ids[start:end]),
                embeddings=np.asarray(vectors[start:end], dtype=np.float32),
                metadatas=[{"doc_id": d or ""} for d in doc_ids[start:end]],
            )

    def delete(self, ids: Sequence[str]) -> None:
        ids = list(ids)
        for start in range(0, len(ids), _ADD_BATCH):
            self.collection.delete(ids=ids[start : start + _ADD_BATCH])

    def delete_documents(self, doc_ids: Sequence[str]) -> None:
        """Remove every chunk of these documents."""
        if doc_ids:
            self.collection.delete(where={"doc_id": {"$in": list(doc_ids)}})

    def ids(self) -> set[str]:
        return set(self.collection.get(include=[])["ids"])

    def count(self) -> int:
        return self.collection.count()

    def close(self) -> None:
        """Release the client (an embedded store's files, so its folder can move)."""
        self.client.close()

    def query(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The `k` nearest chunk ids with their inner product, best first; `k` at most the
        collection's size (the caller knows it: counting costs a round trip per query)."""
        if k <= 0:
            return []
        found = self.collection.query(query_embeddings=[np.asarray(vector, np.float32)], n_results=k,
                                      include=["distances"])
        # Chroma's "ip" distance is 1 - inner product.
        return [(i, 1.0 - d) for i, d in zip(found["ids"][0], found["distances"][0])]


def chroma_errors() -> tuple[type[Exception], ...]:
    """What the Chroma client raises when its server cannot be reached or lacks a collection:
    its own errors (`NotFoundError`...), httpx's, and the bare ValueError and OSError it lets
    through. Imported when a store is on a server, as the client is."""
    import httpx
    from chromadb.errors import ChromaError

    return (ChromaError, httpx.HTTPError, ValueError, OSError)


def client_for(options: VectorStoreOptions, index_dir: Path) -> Any:
    """An HTTP client on `options.uri` (`index_dir` names the index in errors)."""
    try:
        import chromadb
        from chromadb.config import Settings as ChromaSettings
    except ImportError:
        raise ConfigError(
            f"The index at {index_dir} uses a Chroma server ([vector_store] kind = \"server\"); "
            "install its client: pip install 'crag-workflows[chroma]'."
        ) from None

    chroma = ChromaSettings(anonymized_telemetry=False)
    if not options.uri:
        raise ConfigError("vector_store.kind is 'server' but vector_store.uri is not set (e.g. http://host:8000).")
    url = urlparse(options.uri)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ConfigError(f"vector_store.uri {options.uri!r} is not an http(s) URL of a Chroma server.")
    headers = {"Authorization": f"Bearer {options.token.get_secret_value()}"} if options.token else None
    try:
        return chromadb.HttpClient(
            host=url.hostname,
            port=url.port or (443 if url.scheme == "https" else 8000),
            ssl=url.scheme == "https",
            headers=headers,
            settings=chroma,
        )
    except chroma_errors() as exc:
        raise IndexNotFoundError(f"Cannot reach the Chroma server at {options.uri}: {exc}") from None
