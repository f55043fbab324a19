"""An index folder serving three collections ("hr", "legal", "eng") and no default, each a few
small documents of its own: one answers a question every collection can answer (the on-call
codeword), each with its own marker word, so that an answer carrying another collection's
marker or citing another's file shows text that crossed over.

    root = three_collections(tmp / "index")
    question, marker, files = ONCALL, MARKERS["hr"], FILES["hr"]
    add_document(root, "hr", UPDATE)      # a new version of "hr": one more document, a new marker
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crag import ingest
from crag.index.collections import collection_path

NAMES = ("hr", "legal", "eng")
ONCALL = "What is the codeword of the on-call rotation?"  # each collection answers it its own way
MARKERS = {"hr": "HERON-1101", "legal": "LYNX-2202", "eng": "OTTER-3303"}


@dataclass(frozen=True)
class Document:
    """A file of a collection: its name (unique across all three), text and the question it answers."""

    name: str
    text: str
    question: str


def _documents(name: str) -> list[Document]:
    marker = MARKERS[name]
    return [
        Document(
            f"{name}-oncall.md",
            f"# On-call\n\nThe codeword of the on-call rotation of the {name} team is {marker}; "
            f"whoever is on call quotes {marker} when they page another team.\n",
            ONCALL,
        ),
        Document(
            f"{name}-office.md",
            f"# Office\n\nThe {name} team works from the office on floor {NAMES.index(name) + 3}, "
            f"room {marker.lower()}, beside the kitchen.\n",
            f"Which floor does the {name} team work from?",
        ),
    ]


DOCUMENTS = {name: _documents(name) for name in NAMES}
FILES = {name: {d.name for d in docs} for name, docs in DOCUMENTS.items()}
UPDATE = Document(
    "hr-parking.md",
    "# Parking\n\nThe parking permit codeword of the hr team is KESTREL-9904; the guard at the "
    "gate asks for KESTREL-9904 every morning.\n",
    "What is the parking permit codeword of the hr team?",
)
UPDATE_MARKER = "KESTREL-9904"


def docs_folder(root: Path, name: str) -> Path:
    """Where collection `name`'s documents are written, beside the index folder `root`."""
    return root.parent / "three-docs" / name


def three_collections(root: Path) -> Path:
    """Ingest the three collections under the index folder `root`; returns `root`."""
    for name, docs in DOCUMENTS.items():
        folder = docs_folder(root, name)
        folder.mkdir(parents=True)
        for doc in docs:
            (folder / doc.name).write_text(doc.text, encoding="utf-8")
        ingest([folder], collection_path(root, name))
    return root


def add_document(root: Path, name: str, doc: Document) -> None:
    """A new version of collection `name`: its documents and `doc`, ingested into its folder,
    as `crag ingest DOCS --collection NAME` would write it beside a running server."""
    folder = docs_folder(root, name)
    (folder / doc.name).write_text(doc.text, encoding="utf-8")
    ingest([folder], collection_path(root, name))
