"""Opening a file to ingest: refused by what `stat` says before a byte is read (a pipe, a
device, a socket, a sparse file, one over `ingest.max_file_mb`), then read in bounded pieces.

A 3 GB sparse .txt takes no disk and was read whole (6.3 GB of memory) before it was found to
be binary; a named pipe would wait for a writer forever. Both are refused by type and size.

A file found in a folder is opened as the walk saw it (`WalkedPath`): not through a link, and
only if it is still the same file (device and inode). Only the walk checked links, and a file
swapped for a link to /etc/shadow while the ingest ran was read, indexed and quoted.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from crag.errors import IngestError

MB = 1024 * 1024
PIECE = MB  # bytes read at a time
SPARSE_RATIO = 8
"""A file whose disk blocks hold less than 1/8 of its length is sparse: holes, not data. A
compressing file system (ZFS, btrfs) stores text in about a third of its length, well above."""
_SPECIAL = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
            (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


@dataclass(frozen=True)
class ReadLimits:
    """Which links in a folder are followed, and the bounds on reading one file (`crag.toml`'s
    `[ingest]` gives these; its defaults are the same). A file past one is skipped with its reason.

    Args:
        symlinks: links met inside a folder: "skip", or "inside" (follow those whose target
            lies inside that folder).
        max_file_mb: the largest file read, as it lies on disk.
        max_unpacked_mb: bytes unpacked from one .docx, .epub or .pptx, its members together.
        max_text_mb: text taken from one file (from one record of a .jsonl, .csv or .tsv: a
            container of records is bounded by `max_file_mb`), in millions of characters.
        max_seconds: time one file's reader may take, its pages read by OCR included.
        max_memory_mb: memory one file's reader may take beyond what its process starts with.
        max_ocr_pages: scanned pages read by OCR in one file.
    """

    symlinks: Literal["skip", "inside"] = "skip"
    max_file_mb: float = 256.0
    max_unpacked_mb: float = 200.0
    max_text_mb: float = 32.0
    max_seconds: float = 120.0
    max_memory_mb: float = 512.0
    max_ocr_pages: int = 500


@dataclass(frozen=True)
class Seen:
    """The file a folder walk found at a path: its device and inode, and whether the walk
    reached it through a link (`ingest.symlinks = "inside"`)."""

    device: int
    inode: int
    through_link: bool = False


class WalkedPath(type(Path())):  # type: ignore[misc] - PosixPath or WindowsPath (Path is not subclassable before 3.12)
    """A path found by a folder walk, with what the walk saw there: `open_checked` opens that
    file or none. A path made from it (`.parent`, `.resolve()`) saw nothing."""

    seen: Seen | None = None


def walked(path: str | Path, seen: Seen | None) -> Path:
    """`path`, remembering what the walk saw there (where the platform can check it again:
    without O_NOFOLLOW, a plain path)."""
    if seen is None or not hasattr(os, "O_NOFOLLOW"):
        return Path(path)
    found = WalkedPath(path)
    found.seen = seen
    return found


def seen_by_walk(path: Path) -> Seen | None:
    """What the folder walk saw at `path`; None for a path named directly (read as named)."""
    return getattr(path, "seen", None)


def special_kind(mode: int) -> str | None:
    """What a file that is not a regular one is ("a named pipe", "a device"...); None for a
    regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _SPECIAL if test(mode)), "not a regular file")


def refusal(path: Path, status: os.stat_result, limits: ReadLimits) -> str | None:
    """Why `path` must not be read, from its `stat` alone; None when it may be."""
    kind = special_kind(status.st_mode)
    if kind is not None:
        return f"{path} is {kind}, not a regular file; reading it could wait forever. Leave it out."
    size = status.st_size
    on_disk = getattr(status, "st_blocks", None)
    if on_disk is not None and size > MB and on_disk * 512 * SPARSE_RATIO < size:
        return (f"{path} is a sparse file ({_mb(size)} long, {_mb(on_disk * 512)} on disk): "
                "mostly holes, not a document. Leave it out.")
    if size > limits.max_file_mb * MB:
        return (f"{path} is {_mb(size)}, over ingest.max_file_mb ({limits.max_file_mb:g} MB); "
                "split it, or raise the limit.")
    return None


def open_checked(path: Path, limits: ReadLimits) -> BinaryIO:
    """`path` opened for reading, or an `IngestError` saying why it may not be read. A path the
    walk found (`walked`) is opened without following a link, and must still be its file."""
    seen = seen_by_walk(path)
    # Non-blocking: a pipe put where the walk saw a file must not hold the open itself.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    if seen is not None and not seen.through_link:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if seen is not None and exc.errno == errno.ELOOP:
            raise IngestError(f"{path} became a link after the folder was read; not followed. Left out.") from None
        raise IngestError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    try:
        status = os.fstat(fd)
        reason = refusal(path, status, limits)
    except OSError as exc:
        os.close(fd)
        raise IngestError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    if reason is None and seen is not None and (status.st_dev, status.st_ino) != (seen.device, seen.inode):
        reason = (f"{path} is no longer the file found when the folder was read (it, or a folder "
                  "above it, was replaced); left out, and read again by the next ingest.")
    if reason is not None:
        os.close(fd)
        raise IngestError(reason)
    return os.fdopen(fd, "rb")


def file_digest(path: Path, limits: ReadLimits) -> str:
    """The SHA-256 of the file's bytes, read a piece at a time."""
    digest = hashlib.sha256()
    _each_piece(path, limits, digest.update)
    return digest.hexdigest()


def read_checked(path: Path, limits: ReadLimits) -> tuple[bytes, str]:
    """The file's bytes and their SHA-256; a file that grows past the limit as it is read is
    refused all the same."""
    pieces: list[bytes] = []
    digest = hashlib.sha256()

    def keep(piece: bytes) -> None:
        pieces.append(piece)
        digest.update(piece)

    _each_piece(path, limits, keep)
    return b"".join(pieces), digest.hexdigest()


def _each_piece(path: Path, limits: ReadLimits, use: Callable[[bytes], object]) -> None:
    seen = 0
    with open_checked(path, limits) as file:
        try:
            while piece := file.read(PIECE):
                seen += len(piece)
                if seen > limits.max_file_mb * MB:
                    raise IngestError(f"{path} grew past ingest.max_file_mb ({limits.max_file_mb:g} MB) "
                                      "as it was read; leave it out, or raise the limit.")
                use(piece)
        except OSError as exc:
            raise IngestError(f"Cannot read {path}: {exc.strerror or exc}.") from None


def _mb(size: int) -> str:
    return f"{size / MB:,.0f} MB" if size >= MB else f"{size:,} bytes"
