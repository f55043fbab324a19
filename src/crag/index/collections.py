"""Named collections: several indexes under one index folder, each its own document set.

    INDEX/                 the default collection ("default"): today's index, as it always was
    INDEX/collections/hr/  the collection "hr": a whole index of its own (versions, CURRENT,
                           write lock, manifest, grade cache), written by `crag ingest --collection hr`

A collection name is short, lower-case and safe in a path, a URL and a model id
(`crag:hr`): letters, digits, `-` and `_`.
"""

from __future__ import annotations

import re
from pathlib import Path

from crag.errors import ConfigError

DEFAULT = "default"
FOLDER = "collections"
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def check_name(name: str) -> str:
    """`name` if it may name a collection; `ConfigError` saying what a name may hold if not."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError(
            f"{name!r} cannot name a collection: use 1-64 lower-case letters, digits, '-' or '_', "
            "starting with a letter or digit (e.g. hr, legal-2026)."
        )
    return name


def collection_path(root: Path, name: str | None) -> Path:
    """The index folder of collection `name` under the index folder `root` (None: the default)."""
    if name is None or name == DEFAULT:
        return root
    return root / FOLDER / check_name(name)


def found_collections(root: Path) -> dict[str, Path]:
    """The collections under the index folder `root` that hold an index, by name ("default"
    first, then the others sorted): `root` itself when it holds one, and each folder of
    `root/collections/` that does. A folder whose name cannot name a collection (or is "default",
    which is `root`), and a link, are left out: a link is never followed, so a collection is only
    what lies in the folder itself."""
    found = {DEFAULT: root} if holds_index(root) else {}
    folder = root / FOLDER
    if folder.is_symlink() or not folder.is_dir():
        return found
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if NAME.fullmatch(entry.name) and entry.name != DEFAULT and not entry.is_symlink() and holds_index(entry):
            found[entry.name] = entry
    return found


def holds_index(path: Path) -> bool:
    """Whether `path` is a folder holding a crag index: a CURRENT pointer, or a format-1 index
    (which loading it says how to upgrade)."""
    from crag.index.layout import POINTER

    return path.is_dir() and ((path / POINTER).is_file() or (path / "nodes.jsonl").is_file())
