"""An index whose vectors live on a Chroma server: writing a collection per version, opening it,
and dropping an old one."""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Sequence

import numpy as np
from llama_index.core.schema import TextNode

from crag.config import VectorStoreSettings
from crag.errors import ConfigError, IndexNotFoundError
from crag.index.vectors import ChromaStore, client_for


def write_server_vectors(nodes: Sequence[TextNode], embeddings: np.ndarray, vectors: dict,
                         settings: VectorStoreSettings, path: Path) -> dict:
    """Every vector into a new server collection (after the one `vectors` records); the old one
    stays live until the switch. The manifest's new record of the store."""
    generation = int(vectors.get("generation", 0)) + 1
    name = f"{settings.collection}-{generation}"
    store = ChromaStore(client_for(settings, path), name, create=True)
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


def open_server_store(path: Path, vectors: dict, settings: VectorStoreSettings) -> ChromaStore:
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


def drop_collection(settings: VectorStoreSettings, path: Path, manifest: Path) -> None:
    try:
        name = json.loads(manifest.read_text(encoding="utf-8"))["vectors"]["collection"]
        client = client_for(settings, path)
    except Exception:  # noqa: BLE001 - no record, or no server: nothing to clean up
        return
    try:
        client.delete_collection(name)
    except Exception:  # noqa: BLE001 - already gone
        pass


