"""An index whose vectors live on a Chroma server: writing a collection per version, opening it,
and dropping an old one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from llama_index.core.schema import TextNode

from crag.errors import ConfigError, CragError, IndexNotFoundError
from crag.index.vectors import ChromaStore, VectorStoreOptions, chroma_errors, client_for


def write_server_vectors(nodes: Sequence[TextNode], embeddings: np.ndarray, vectors: dict,
                         options: VectorStoreOptions, path: Path) -> dict:
    """Every vector into a new server collection (after the one `vectors` records); the old one
    stays live until the switch. The manifest's new record of the store."""
    generation = int(vectors.get("generation", 0)) + 1
    name = f"{options.collection}-{generation}"
    store = ChromaStore(client_for(options, path), name, create=True)
    try:
        ids = [n.node_id for n in nodes]
        stored = store.ids()
        store.delete([i for i in stored if i not in set(ids)])  # left by an interrupted ingest
        missing = [p for p, i in enumerate(ids) if i not in stored]
        store.add([ids[p] for p in missing], [nodes[p].ref_doc_id or "" for p in missing],
                  np.asarray(embeddings[missing], np.float32))
    finally:
        store.close()
    return {"kind": "server", "collection": name, "count": len(ids), "generation": generation}


def open_server_store(path: Path, vectors: dict, options: VectorStoreOptions) -> ChromaStore:
    if options.kind != "server":
        raise ConfigError(
            f"The index at {path} keeps its vectors on a Chroma server (collection "
            f"{vectors.get('collection')!r}); set [vector_store] kind = \"server\" and its uri."
        )
    try:
        return ChromaStore(client_for(options, path), vectors["collection"])
    except (ConfigError, IndexNotFoundError):
        raise
    except (*chroma_errors(), LookupError, TypeError) as exc:  # the server's, or the record's
        raise IndexNotFoundError(
            f"The Chroma collection of the index at {path} is unreadable ({exc}); "
            f"build it again: crag ingest YOUR_DOCS --index {path}"
        ) from None


def drop_collection(options: VectorStoreOptions, path: Path, manifest: Path) -> None:
    try:
        name = json.loads(manifest.read_text(encoding="utf-8"))["vectors"]["collection"]
        client = client_for(options, path)
    except (OSError, ValueError, LookupError, TypeError, CragError):  # no record, or no server
        return  # nothing to clean up
    try:
        client.delete_collection(name)
    except chroma_errors():  # already gone, or the server is
        pass


