"""The index folder on disk: its versions, the CURRENT pointer, the write lock, and reading and
writing its files safely (see `crag.index.store` for the layout)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from tokenize import TokenError
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock, Timeout

from crag.errors import IndexNotFoundError, IngestError
from crag.index.server_vectors import drop_collection
from crag.index.vectors import VectorStoreOptions

FORMAT_VERSION = 2
# What reading a damaged file of the index raises, beside OSError: NumPy's .npy header parser
# alone raises ValueError, EOFError, SyntaxError or tokenize's TokenError; a shape or dtype
# that does not fit, ValueError, TypeError or an ArithmeticError; JSON of the wrong shape (bm25s
# reads its own), a LookupError, TypeError or AttributeError. Anything else is a bug of crag's.
DAMAGED_FILE = (ValueError, EOFError, SyntaxError, TokenError, LookupError, TypeError, AttributeError,
                ArithmeticError, RecursionError)
EMBEDDING_DIM = 256
POINTER = "CURRENT"
VERSION_NAME = re.compile(r"v(\d+)")
# What crag keeps in an index folder: the versions and their pointer, the write lock, the named
# collections' folder, the grade cache, the run store and the keys file (with their journals and
# locks); no ingest removes any but stale versions and interrupted writes.
OWN_NAMES = re.compile(
    r"(CURRENT|\.lock|v\d+|\.v\d+\.tmp-\w+|\.CURRENT\.tmp-\w+|collections|keys\.json(\.lock)?|\.keys\.json\.tmp-\w+"
    r"|(server\.db|grades\.sqlite)(-wal|-shm|-journal|\.corrupt-\d+)?)"
)
# An ingest's own interrupted writes: a version or pointer being written (not another writer's
# temporary file, such as the keys file's, which that writer renames into place).
INTERRUPTED = re.compile(r"\.(v\d+|CURRENT)\.tmp-\w+")


class OldIndexFormatError(IndexNotFoundError):
    """The index was written by an earlier crag; `crag ingest` upgrades it."""


CHECKED_FILES = ("nodes.jsonl", "offsets.npy", "embeddings.npy",
                 "lexical/terms.ids.npy", "lexical/terms.indptr.npy", "lexical/vocab.json")


def sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def recorded_chunker(path: Path) -> str:
    """The chunker signature the index at `path` was cut with ("" when there is no readable index)."""
    try:
        return str(read_manifest(live_version(path) / "manifest.json").get("chunker", ""))
    except (IndexNotFoundError, ValueError, OSError):
        return ""


def check_index_folder(path: Path) -> None:
    """Refuse to write into a file, or into a folder of other things that is not a crag index."""
    if not path.exists():
        return
    if not path.is_dir():
        raise IngestError(f"{path} is a file, not a crag index folder; choose another --index.")
    strangers = [p.name for p in path.iterdir() if not OWN_NAMES.fullmatch(p.name) and p.name not in FORMAT1_FILES]
    if strangers and not (path / POINTER).exists() and not (path / "nodes.jsonl").exists():
        raise IngestError(
            f"{path} is a folder of other things ({', '.join(sorted(strangers)[:3])}...), not a crag index; "
            "choose an empty or new --index folder."
        )


@contextmanager
def writer_lock(path: Path) -> Iterator[None]:
    """Hold the index's write lock: one ingest at a time writes a folder; a second one fails.

    `filelock` takes an OS lock (flock, or LockFileEx on Windows) that the system releases
    if the holder dies, so a killed ingest never leaves the folder locked.
    """
    path.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(path / ".lock", timeout=0):
            yield
    except Timeout:
        raise IngestError(
            f"Another crag ingest is writing the index at {path}; run this again when it has finished."
        ) from None


FORMAT1_FILES = ("nodes.jsonl", "embeddings.npy", "manifest.json", "summaries.json", "vectors")


def live_version(path: Path) -> Path:
    pointer = path / POINTER
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        if (path / "nodes.jsonl").exists():
            raise OldIndexFormatError(
                f"The index at {path} was written by an earlier crag (index format 1). Upgrade it once "
                f"with: crag ingest YOUR_DOCS --index {path} (unchanged files are not read or embedded again)."
            ) from None
        raise IndexNotFoundError(
            f"No crag index at {path}. Build one first: crag ingest YOUR_DOCS --index {path}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise IndexNotFoundError.damaged(path, f"is unreadable ({reason(exc)})") from None
    if not VERSION_NAME.fullmatch(name) or not (path / name).is_dir():
        raise IndexNotFoundError.damaged(path, f"is damaged ({POINTER} names no version)")
    return path / name


def read_manifest(file: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError("manifest.json is missing") from None
    except ValueError:  # also UnicodeDecodeError
        raise ValueError("manifest.json is not valid JSON") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise ValueError("manifest.json is not crag's manifest")
    if manifest.get("format") != FORMAT_VERSION:
        raise ValueError(f"manifest.json has index format {manifest.get('format')!r}; this crag reads {FORMAT_VERSION}")
    vectors = manifest.get("vectors") or {}
    if not isinstance(vectors, dict) or (vectors.get("kind") == "server" and not isinstance(vectors.get("collection"), str)):
        raise ValueError("manifest.json's vector store record is damaged")
    return manifest


def read_array(file: Path) -> np.ndarray:
    """A memory-mapped .npy; ValueError naming the file when it is missing or damaged."""
    try:
        return np.load(file, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise ValueError(f"{file.name} is missing") from None
    except DAMAGED_FILE:
        raise ValueError(f"{file.name} is not a NumPy array file") from None


def read_summaries(file: Path) -> dict[str, str]:
    if not file.exists():
        return {}
    try:
        summaries = json.loads(file.read_text(encoding="utf-8"))
    except ValueError:
        raise ValueError("summaries.json is not valid JSON") from None
    if not isinstance(summaries, dict) or not all(isinstance(v, str) for v in summaries.values()):
        raise ValueError("summaries.json is not crag's summaries")
    return summaries


def consistency_problem(version: Path, manifest: dict, embeddings: np.ndarray, nodes: int, lexical: int) -> str | None:
    """What disagrees among the manifest, chunks, embeddings and lexical statistics, if anything."""
    if embeddings.ndim != 2 or embeddings.shape[1:] != (EMBEDDING_DIM,) or embeddings.dtype != np.float32:
        return f"embeddings are {embeddings.dtype} {embeddings.shape}, expected float32 (chunks, {EMBEDDING_DIM})"
    counts = {"manifest": manifest.get("chunks"), "chunks": nodes, "embeddings": embeddings.shape[0], "lexical": lexical}
    if len(set(counts.values())) > 1:
        return ", ".join(f"{k} {v}" for k, v in counts.items())
    offsets = read_array(version / "offsets.npy")
    if offsets.ndim != 1 or offsets.dtype != np.int64 or not len(offsets) or int(offsets[0]) != 0 \
            or np.any(np.diff(offsets) <= 0):
        return "offsets.npy is damaged"
    if (version / "nodes.jsonl").stat().st_size != int(offsets[-1]):
        return "nodes.jsonl is not the length its offsets say"
    return None


def reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def point_to(path: Path, name: str) -> None:
    tmp = path / f".{POINTER}.tmp-{uuid.uuid4().hex[:12]}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path / POINTER)
    fsync_dir(path)


def remove_stale(path: Path, keep: set[str], store: VectorStoreOptions) -> None:
    """Older versions, interrupted writes and a format-1 index's files (under the write lock)."""
    for entry in path.iterdir():
        stale_version = VERSION_NAME.fullmatch(entry.name) and entry.name not in keep
        if stale_version and store.kind == "server":
            drop_collection(store, path, entry / "manifest.json")
        if stale_version or INTERRUPTED.fullmatch(entry.name) or entry.name in FORMAT1_FILES:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def write_failure(path: Path, exc: OSError) -> str:
    import errno

    if exc.errno == errno.ENOSPC:
        return f"The disk holding {path} is full; free some space and run the ingest again (the index is unchanged)."
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"Cannot write the index at {path} ({exc.strerror}); choose a writable --index (the index is unchanged)."
    return f"Cannot write the index at {path} ({exc.strerror or exc}); the index is unchanged."


def fsync_tree(folder: Path) -> None:
    for file in folder.rglob("*"):
        if file.is_file():
            with open(file, "rb") as f:
                os.fsync(f.fileno())
    for sub in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
        fsync_dir(sub)


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # not possible on every platform
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
