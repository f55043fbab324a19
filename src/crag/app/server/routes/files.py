"""`GET /files/{file_id}`: a document the index holds, so that a citation can open it at its page.

Only files listed in the manifest of the index being served (`RunService.index`, which a
reload replaces) are served, by the id their citations carry
(`crag.trace.file_id`, a hash of the path, so no path is ever taken from the request), behind the
same API key as every other route. A file since removed from the disk, or an id the manifest does
not list, is a 404.

What the manifest records is where a file was, resolved, at ingest, and its size and SHA-256
then; what is there now is checked again at each request. The path is opened one folder at a
time without following a link, so a file or a folder swapped for a symlink since (to /etc/shadow,
to the index's own secrets) is a 404, and only a regular file is read (never a FIFO, which would
hang, or a device). The manifest is a plain file with no checksum of its own, so it is not
trusted either: what was opened is served only if it has the size and SHA-256 ingest recorded
(a manifest edited to name /etc/shadow cannot know its hash), a file edited since its ingest is a
404 until it is ingested again, an entry with no size or hash is never served, and nothing under
the index folder (its keys, its versions) is served whatever the manifest says. A file is hashed
once per version (`VerifiedFiles`: its device, inode, size, mtime and ctime), off the event
loop, and what is sent is read from the descriptor that was hashed, so nothing can be swapped
in between.

A served document is the document's content in this server's origin, where the live page keeps
its API key, so nothing in it may run: its type comes from an allow-list by its name (`SHOWN`),
never sniffed (`nosniff`), and every type but PDF is sandboxed (`Content-Security-Policy:
sandbox`: no script, an origin of its own, nothing fetched). PDF is not, since Chromium's viewer
will not open in a sandboxed document; its scripts run in the viewer, not in the page. Anything
else (Word, EPUB, SVG, XML) is sent as an attachment of no particular type, to be saved.

One byte range is served as asked (`Range: bytes=a-b`, 206), so a viewer opens page 300 of a
large PDF without fetching the whole file first; several ranges get the whole file (200), as
the standard allows, and a range past the end is a 416.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import stat
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from crag._offload import off_loop
from crag.index import ChunkIndex
from crag.index.collections import FOLDER, holds_index
from crag.trace import file_id

logger = logging.getLogger(__name__)

NOT_FOUND = {"detail": "No such document in the index."}
KNOWN_INDEXES = 64  # indexes whose file lists are kept read (collections, and those reloads replaced)
TEXT = "text/plain; charset=utf-8"
SHOWN = {  # suffix -> the type a browser is told; shown in place, at a citation's #page=N
    ".pdf": "application/pdf",
    ".html": "text/html; charset=utf-8", ".htm": "text/html; charset=utf-8",  # sandboxed
    **dict.fromkeys((".txt", ".md", ".markdown", ".rst", ".csv", ".tsv", ".json", ".jsonl", ".log"), TEXT),
    ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
}
SAVED = "application/octet-stream"
# No script, an opaque origin, no forms or pop-ups; nothing fetched but inline styles and images.
SANDBOX = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:"
BLOCK = 1 << 16
HASH_BLOCK = 1 << 20
VERIFIED_LIMIT = 1024  # file versions whose hash is kept: a few hundred bytes each
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


@dataclass(frozen=True)
class Recorded:
    """A file the index holds, as ingest recorded it: where it was, resolved, its size and SHA-256."""

    path: Path
    size: int
    sha256: str


def served_files(index: ChunkIndex | None) -> dict[str, Recorded]:
    """The served index's files by id. Documents given from Python (`document:` keys) have no
    file to serve; an entry with no size and SHA-256 (every manifest ingest writes has both), or
    one under the index folder itself, is never served, and the log says so once per index.
    Reads the disk (the index folder's real path): call it off the event loop."""
    if index is None:
        return {}
    inside = _index_folders(index.path)
    files: dict[str, Recorded] = {}
    refused: list[str] = []
    for key, entry in index.manifest.items():
        if key.startswith("document:"):
            continue
        path = Path(key)
        size, digest = (entry.get("size"), entry.get("sha256")) if isinstance(entry, dict) else (None, None)
        if not isinstance(size, int) or size < 0 or not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            refused.append(f"{key} (no size and SHA-256 recorded)")
        elif any(path.is_relative_to(folder) for folder in inside):
            refused.append(f"{key} (inside the index folder)")
        else:
            files[file_id(key)] = Recorded(path, size, digest)
    if refused:
        logger.warning("/files will not serve %d file(s) the manifest of %s lists: %s%s.",
                       len(refused), index.path, ", ".join(refused[:3]), ", ..." if len(refused) > 3 else "")
    return files


def _index_folders(path: Path | None) -> list[Path]:
    """The index folder `path` as given and as resolved; for a collection's index
    (`INDEX/collections/NAME`), the whole index folder above it too (its keys.json lies there)."""
    if path is None:
        return []
    folders = [path]
    root = path.parent.parent
    if path.parent.name == FOLDER and (holds_index(root) or (root / "keys.json").is_file()):
        folders.append(root)
    return [found for folder in folders for found in (folder.absolute(), Path(os.path.realpath(folder)))]


def sha256_of(fd: int) -> str | None:
    """The SHA-256 of the whole file open as `fd`, which this closes; None when it cannot be read."""
    digest = hashlib.sha256()
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        while block := os.read(fd, HASH_BLOCK):
            digest.update(block)
    except OSError:
        return None
    finally:
        os.close(fd)
    return digest.hexdigest()


class VerifiedFiles:
    """Which opened files are the ones ingest recorded: each version of a file (its device,
    inode, size, mtime and ctime, from the open descriptor) is hashed once and its SHA-256 kept,
    the last `limit` versions seen, so a large PDF is read whole on its first request only, and
    again once it changes (a write changes mtime, and setting mtime back changes ctime).
    Requests that find the same version being hashed wait for that one hash."""

    def __init__(self, limit: int = VERIFIED_LIMIT) -> None:
        self.limit = limit
        self._digests: OrderedDict[tuple[int, ...], str] = OrderedDict()  # "": seen, not hashed
        self._hashing: dict[tuple[int, ...], asyncio.Future[str | None]] = {}

    async def matches(self, file: BinaryIO, status: os.stat_result, recorded: Recorded) -> bool:
        """Whether `file` (open, `status` its fstat) has the size and SHA-256 of `recorded`."""
        version = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
        if status.st_size != recorded.size:
            if version not in self._digests:  # said once per version, not at every request
                logger.warning("/files does not serve %s: it has %d bytes, the index recorded %d "
                               "(changed since its ingest, or not the file ingested).",
                               recorded.path, status.st_size, recorded.size)
                self._keep(version, "")
            return False
        digest = self._digests.get(version)
        if digest:
            self._digests.move_to_end(version)
        else:
            digest, first = await self._hash(version, file)
            if first and digest is not None and digest != recorded.sha256:
                logger.warning("/files does not serve %s: its SHA-256 is not the one the index recorded "
                               "(changed since its ingest, or not the file ingested).", recorded.path)
        return digest == recorded.sha256

    async def _hash(self, version: tuple[int, ...], file: BinaryIO) -> tuple[str | None, bool]:
        pending = self._hashing.get(version)
        first = pending is None
        if pending is None:
            # A descriptor of its own: the request may end (and close `file`) while this reads.
            pending = asyncio.ensure_future(off_loop(sha256_of, os.dup(file.fileno())))
            self._hashing[version] = pending
            pending.add_done_callback(lambda done: self._hashed(version, done))
        return await asyncio.shield(pending), first

    def _hashed(self, version: tuple[int, ...], done: asyncio.Future[str | None]) -> None:
        self._hashing.pop(version, None)
        if not done.cancelled() and done.exception() is None and (digest := done.result()) is not None:
            self._keep(version, digest)

    def _keep(self, version: tuple[int, ...], digest: str) -> None:
        self._digests[version] = digest
        self._digests.move_to_end(version)
        while len(self._digests) > self.limit:
            self._digests.popitem(last=False)


def open_recorded(path: Path) -> tuple[BinaryIO, os.stat_result] | None:
    """`open_regular(path)` with its fstat."""
    opened = open_regular(path)
    return None if opened is None else (opened, os.fstat(opened.fileno()))


def open_regular(path: Path) -> BinaryIO | None:
    """`path` open for reading if it is now a regular file at exactly that path, reached through
    no link at all (every folder on the way opened with O_NOFOLLOW, relative to the one before,
    so nothing can be swapped in between the checks); else None."""
    if not path.is_absolute() or any(part in (".", "..") for part in path.parts):
        return None
    try:
        if _NOFOLLOW and _DIRECTORY and os.open in os.supports_dir_fd:
            fd = _open_by_folders(path)
        else:  # no openat: the path must still resolve to itself, then the last step not a link
            if os.path.realpath(path) != str(path):
                return None
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_BINARY", 0))
    except OSError:  # missing, a link (ELOOP), not a folder, no permission
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def _open_by_folders(path: Path) -> int:
    root, *folders, name = path.parts
    folder = os.open(root, os.O_RDONLY | _DIRECTORY)
    try:
        for part in folders:
            inner = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=folder)
            os.close(folder)
            folder = inner
        # O_NONBLOCK: opening a FIFO put there must not wait for a writer (it is refused after)
        return os.open(name, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    finally:
        os.close(folder)


def headers_for(name: str) -> tuple[str, dict[str, str]]:
    """The type a file named `name` is served as, and the headers that keep it inert."""
    kind = SHOWN.get(Path(name).suffix.lower())
    headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
    if kind != "application/pdf":
        headers["Content-Security-Policy"] = SANDBOX
    shown = "inline" if kind else "attachment"  # inline: a browser opens a PDF at #page=N
    headers["Content-Disposition"] = f"{shown}; filename*=utf-8''{quote(name, safe='')}"
    return kind or SAVED, headers


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one range `header` asks of a file of `size` bytes, as (first, last) inclusive; None
    for the whole file (no header, several ranges, or one this server does not read). A range
    that starts past the end raises ValueError (416)."""
    found = _RANGE.fullmatch((header or "").strip())
    if found is None or found.group(1) == found.group(2) == "":
        return None
    first, last = found.groups()
    if first == "":  # "bytes=-500": the last 500 bytes
        return (max(0, size - int(last)), size - 1) if int(last) and size else None
    if int(first) >= size:
        raise ValueError(f"range starts at byte {first}, the file has {size}")
    end = size - 1 if last == "" else min(int(last), size - 1)
    if end < int(first):
        return None  # a range that ends before it starts is not a range: the whole file
    return int(first), end


def files_route(served: Callable[[Request], list[ChunkIndex | None]]) -> Route:
    """The route, serving the files of the indexes `served(request)` says the caller may read
    now (the collections its key may ask: crag.app.access); a file of any other is a 404."""

    known: dict[int, tuple[ChunkIndex | None, dict[str, Recorded]]] = {}  # read once per index
    verified = VerifiedFiles()

    async def files_of(index: ChunkIndex | None) -> dict[str, Recorded]:
        seen = known.get(id(index))
        if seen is None or seen[0] is not index:
            if len(known) >= KNOWN_INDEXES:
                known.clear()  # bounded: each reload leaves an old index behind
            seen = known[id(index)] = (index, await off_loop(served_files, index))
        return seen[1]

    async def document(request: Request) -> Response:
        recorded: Recorded | None = None
        for index in served(request):
            recorded = (await files_of(index)).get(request.path_params["file_id"])
            if recorded is not None:
                break
        opened = await off_loop(open_recorded, recorded.path) if recorded is not None else None
        if opened is None:
            return JSONResponse(NOT_FOUND, status_code=404)
        opened, found = opened
        try:
            ingested = await verified.matches(opened, found, recorded)
        except BaseException:  # cancelled: the client left
            opened.close()
            raise
        if not ingested:  # the same reply as a file that is not there
            opened.close()
            return JSONResponse(NOT_FOUND, status_code=404)
        size, path = found.st_size, recorded.path
        kind, headers = headers_for(path.name)
        headers["Accept-Ranges"] = "bytes"
        try:
            asked = byte_range(request.headers.get("range"), size)
        except ValueError:
            opened.close()
            return Response(status_code=416, headers={"Content-Range": f"bytes */{size}"})
        first, last = asked or (0, size - 1)
        status = 200 if asked is None else 206
        if asked is not None:
            headers["Content-Range"] = f"bytes {first}-{last}/{size}"
        headers["Content-Length"] = str(last - first + 1)

        async def content() -> AsyncIterator[bytes]:
            try:  # what was opened and checked is what is sent, its size as it was then
                left = last - first + 1
                await off_loop(opened.seek, first)  # always: hashing it moved the offset
                while left > 0 and (block := await off_loop(opened.read, min(BLOCK, left))):
                    left -= len(block)
                    yield block
            finally:
                opened.close()

        return StreamingResponse(content(), status_code=status, media_type=kind, headers=headers)

    return Route("/files/{file_id}", document, methods=["GET"])
