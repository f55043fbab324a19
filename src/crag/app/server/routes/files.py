"""`GET /files/{file_id}`: a document the index holds, so that a citation can open it at its page.

Only files listed in the manifest of the index being served (`RunService.index`, which a
reload replaces) are served, by the id their citations carry
(`crag.trace.file_id`, a hash of the path, so no path is ever taken from the request), behind the
same API key as every other route. A file since removed from the disk, or an id the manifest does
not list, is a 404.

What the manifest records is where a file was, resolved, at ingest; what is there now is checked
again at each request. The path is opened one folder at a time without following a link, so a
file or a folder swapped for a symlink since (to /etc/shadow, to the index's own secrets) is a
404, and only a regular file is read (never a FIFO, which would hang, or a device).

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

import os
import re
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from crag._offload import off_loop
from crag.index import ChunkIndex
from crag.trace import file_id

NOT_FOUND = {"detail": "No such document in the index."}
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
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def served_files(index: ChunkIndex | None) -> dict[str, Path]:
    """The served index's files by id; documents given from Python (`document:` keys) have no
    file to serve."""
    files = index.manifest if index is not None else {}
    return {file_id(key): Path(key) for key in files if not key.startswith("document:")}


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


def files_route(served: Callable[[], ChunkIndex | None]) -> Route:
    """The route, serving the files of whatever index `served()` says is served now."""

    known: list = [None, {}]  # the index last seen, and its files by id: hashed once per index

    async def document(request: Request) -> Response:
        index = served()
        if index is not known[0]:
            known[:] = [index, served_files(index)]
        path = known[1].get(request.path_params["file_id"])
        opened = await off_loop(open_regular, path) if path is not None else None
        if opened is None:
            return JSONResponse(NOT_FOUND, status_code=404)
        size = os.fstat(opened.fileno()).st_size
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
                if first:
                    await off_loop(opened.seek, first)
                while left > 0 and (block := await off_loop(opened.read, min(BLOCK, left))):
                    left -= len(block)
                    yield block
            finally:
                opened.close()

        return StreamingResponse(content(), status_code=status, media_type=kind, headers=headers)

    return Route("/files/{file_id}", document, methods=["GET"])
