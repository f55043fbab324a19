"""Documents handed to `crag.ingest(documents=...)`: llama-index `Document`s from
SimpleDirectoryReader or a LlamaHub reader, indexed beside crag's own files.

Each is recorded in the manifest under `document:<doc_id>` with a hash of its text and
place, so a second ingest of the same documents embeds nothing. Their metadata is mapped
to crag's: `page_label` becomes `page`, and `file_path` gives `file_name` where it is
missing, so a citation reads "report.pdf, p. 3" as for a file crag read itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.cleaning import clean
from crag.ingestion.formats import LOCATION_KEYS

KEY_PREFIX = "document:"
# Metadata SimpleDirectoryReader adds that says nothing a reader or a model needs.
_FILE_KEYS = ("file_path", "file_type", "file_size", "creation_date", "last_modified_date",
              "last_accessed_date", "page_label")


def manifest_key(doc_id: str) -> str:
    """The manifest's key for a given document."""
    return f"{KEY_PREFIX}{doc_id}"


def as_crag_document(document: object) -> Document:
    """A copy of `document` with crag's metadata (the caller's object is left as it was)."""
    if not isinstance(document, Document):
        raise IngestError(f"documents= takes llama-index Document objects, not {type(document).__name__}.")
    metadata = dict(document.metadata)
    if "page_label" in metadata and "page" not in metadata:
        metadata["page"] = str(metadata["page_label"])
    if not metadata.get("file_name") and metadata.get("file_path"):
        metadata["file_name"] = Path(str(metadata["file_path"])).name
    if not metadata.get("title"):
        name = metadata.get("file_name")
        metadata["title"] = Path(str(name)).stem if name else document.doc_id
    copy = clean(Document(text=document.text, id_=document.doc_id, metadata=metadata))
    copy.excluded_embed_metadata_keys = sorted({*document.excluded_embed_metadata_keys, *_FILE_KEYS})
    copy.excluded_llm_metadata_keys = sorted({*document.excluded_llm_metadata_keys, *_FILE_KEYS})
    return copy


def fingerprint(document: Document) -> dict:
    """The manifest entry of a given document: a hash of its text and of where it sits."""
    place = {k: document.metadata.get(k) for k in LOCATION_KEYS}
    digest = hashlib.sha256(document.text.encode("utf-8", "surrogatepass"))
    digest.update(json.dumps(place, sort_keys=True, default=str).encode("utf-8"))
    return {"size": len(document.text), "mtime_ns": 0, "sha256": digest.hexdigest()}


def prepare(documents: Iterable[object]) -> list[Document]:
    """The given documents as crag's, those without text left out; an id given twice is an error."""
    seen: set[str] = set()
    out = []
    for document in documents:
        copy = as_crag_document(document)
        if copy.doc_id in seen:
            raise IngestError(f"Document id {copy.doc_id!r} is given twice; ids must be unique "
                              "(SimpleDirectoryReader: pass filename_as_id=True).")
        seen.add(copy.doc_id)
        if copy.text.strip():
            out.append(copy)
    return out
