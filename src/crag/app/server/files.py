"""`GET /files/{file_id}`: a document the index holds, so that a citation can open it at its page.

Only files listed in the live index's manifest are served, by the id their citations carry
(`crag.trace.file_id`, a hash of the path, so no path is ever taken from the request), behind the
same API key as every other route. A file since removed from the disk, or an id the manifest does
not list, is a 404.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from crag._offload import off_loop
from crag.index.layout import live_version, read_manifest
from crag.trace import file_id

NOT_FOUND = {"detail": "No such document in the index."}


def served_files(index_path: Path) -> dict[str, Path]:
    """The live index's files by id: read from its manifest each time (an ingest or a reload may
    have changed it); documents given from Python (`document:` keys) have no file to serve."""
    try:
        manifest = read_manifest(live_version(index_path) / "manifest.json")
    except Exception:  # noqa: BLE001 - no readable index: nothing to serve
        return {}
    return {file_id(key): Path(key) for key in manifest["files"] if not key.startswith("document:")}


def files_route(index_path: Path) -> Route:
    async def document(request: Request) -> Response:
        path = (await off_loop(served_files, index_path)).get(request.path_params["file_id"])
        if path is None or not path.is_file():
            return JSONResponse(NOT_FOUND, status_code=404)
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        # inline: a browser shows a PDF itself, and opens it at the citation's #page=N
        return FileResponse(path, media_type=kind, content_disposition_type="inline", filename=path.name)

    return Route("/files/{file_id}", document, methods=["GET"])
