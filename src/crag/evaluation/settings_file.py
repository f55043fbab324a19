"""Writes settings into a `crag.toml` without disturbing anything else in it.

tomlkit edits the document it parsed: only the named keys of one table change, and every other
line (other tables, other keys, comments, order) is kept as it was, whichever TOML form the
table is written in (a `[table]`, an inline table, dotted keys). The new text is parsed and
checked before it replaces the file, and it replaces it atomically (a sibling temporary file,
then a rename), so a failure leaves the old file intact.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from crag.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def set_table_values(
    path: str | Path, table: str, values: Mapping[str, float | str | bool]
) -> None:
    """Set `values` in `[table]` of the TOML file at `path`, creating the file or table if needed.

    Raises:
        ConfigError: the file is not valid TOML, `table` is not a table, or the file cannot
            be written.
    """
    path = Path(path)
    old_text = path.read_text(encoding="utf-8") if path.exists() else ""
    old = _parse(old_text, path)
    if table in old and not isinstance(old[table], dict):
        raise ConfigError(f"{path}: '{table}' is not a table; set {', '.join(values)} by hand.")
    document = tomlkit.parse(old_text)
    if table not in document:
        document[table] = tomlkit.table()
    for key, value in values.items():
        document[table][key] = value
    new_text = tomlkit.dumps(document)
    expected = {k: dict(v) if isinstance(v, dict) else v for k, v in old.items()}
    expected.setdefault(table, {}).update(values)
    if _parse(new_text, path) != expected:  # the edit must change exactly the named keys
        raise ConfigError(f"{path}: could not update [{table}] safely; set {', '.join(values)} by hand.")
    _write_atomically(path, new_text)


def _parse(text: str, path: Path) -> dict[str, Any]:
    try:
        tomlkit.parse(text)
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, TOMLKitError) as exc:
        raise ConfigError(f"Config file {path} is not valid TOML: {exc}") from None


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"Cannot write {path}: {exc.strerror or exc}.") from None
