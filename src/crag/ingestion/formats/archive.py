"""The zip inside .docx, .xlsx, .epub and .pptx files, read with the bytes it unpacks counted as they
stream, so that a zip bomb is stopped at the limit rather than after it has filled memory.

The size a member declares is not trusted: it is the bomb's own claim. Only stored and deflated
members are read. Python's zipfile inflates deflate a bounded piece at a time, but hands a
bzip2 or LZMA member's compressed bytes to a decompressor with no bound on its output, so a
2.6 KB bzip2 member "of 1,000 bytes" unpacked to 6.3 GB before it was cut to its claim. Office
and EPUB writers use deflate; nothing else is met in files people keep.
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from xml.etree import ElementTree

from crag.errors import IngestError

PIECE = 64 * 1024  # bytes unpacked at a time
MB = 1024 * 1024
unpack_limit: ContextVar[int] = ContextVar("unpack_limit", default=200 * MB)
"""Bytes one file's members may unpack to, together (`ingest.max_unpacked_mb`); set by
`crag.ingestion.readers.read_documents` around each read."""
_READABLE = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}
_METHODS = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "LZMA"}


def open_zip(path: Path, data: bytes) -> zipfile.ZipFile:
    """`data` as a zip archive; `zipfile.BadZipFile` when it is not one."""
    return zipfile.ZipFile(io.BytesIO(data))


class Unpacker:
    """One archive's members read against one budget: `unpacked` counts the bytes inflated so
    far, every member together, and reading past the limit is an `IngestError`."""

    def __init__(self, path: Path, archive: zipfile.ZipFile, limit: int | None = None) -> None:
        self.path = path
        self.archive = archive
        self.limit = unpack_limit.get() if limit is None else limit
        self.unpacked = 0

    def read(self, name: str) -> bytes:
        """The member's bytes."""
        return b"".join(self.stream(name))

    def stream(self, name: str) -> Iterator[bytes]:
        """The member's bytes, a bounded piece at a time."""
        info = self.archive.getinfo(name)
        if info.compress_type not in _READABLE:
            method = _METHODS.get(info.compress_type, f"method {info.compress_type}")
            raise IngestError(f"{self.path}: {name} is compressed with {method}, which crag does not "
                              "unpack (only stored or deflated members, as Office and EPUB writers "
                              "make them); save the file again, or leave it out.")
        if info.file_size > self.limit - self.unpacked:  # an honest claim is refused unread
            self._over(name)
        with self.archive.open(info) as member:
            while piece := member.read(PIECE):
                self.unpacked += len(piece)
                if self.unpacked > self.limit:
                    self._over(name)
                yield piece

    def check_all(self) -> None:
        """Stream every member, keeping nothing: for a library that reads them all itself
        (python-pptx), handed the archive once each member is known to unpack within bounds."""
        for info in self.archive.infolist():
            if not info.is_dir():
                for _ in self.stream(info.filename):
                    pass

    def _over(self, name: str) -> None:
        raise IngestError(f"{self.path}: unpacking {name} takes it past ingest.max_unpacked_mb "
                          f"({self.limit / MB:g} MB unpacked); a zip bomb, or a file to split. Left out.")


_RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"


def relationships(unpacker: Unpacker, part: str) -> dict[str, tuple[str, str]]:
    """An Office part's links to other parts (its `_rels/<name>.rels`): id -> (type, the
    member it names), the type its last word ("worksheet", "chart"); links out of the file
    and to members that are not there are left out."""
    folder, name = posixpath.split(part)
    rels = posixpath.join(folder, "_rels", f"{name}.rels")
    members = set(unpacker.archive.namelist())
    if rels not in members:
        return {}
    found = {}
    for link in ElementTree.fromstring(unpacker.read(rels)).iter(_RELS):
        target = link.get("Target", "")
        if link.get("TargetMode") == "External" or not target:
            continue
        member = target.lstrip("/") if target.startswith("/") else posixpath.normpath(
            posixpath.join(folder, target))
        if member in members:
            found[link.get("Id", "")] = (link.get("Type", "").rsplit("/", 1)[-1], member)
    return found
