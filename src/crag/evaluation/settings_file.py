"""Writes settings into a `crag.toml` without disturbing anything else in it.

Only the named keys of one table change: every other line (other tables, other keys,
comments) is kept as it was. The new text is parsed and checked before it replaces the
file, and it replaces it atomically (a sibling temporary file, then a rename), so a
failure leaves the old file intact.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crag.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_HEADER = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\-\s\"']+?)\s*\]\s*(#.*)?$")
_ARRAY_HEADER = re.compile(r"^\s*\[\[")


def set_table_values(
    path: str | Path, table: str, values: Mapping[str, float | str | bool]
) -> None:
    """Set `values` in `[table]` of the TOML file at `path`, creating the file or table if needed.

    Raises:
        ConfigError: the file is not valid TOML, defines the table in a form this editor
            does not rewrite (inline, dotted keys, sub-tables only), or cannot be written.
    """
    path = Path(path)
    old_text = path.read_text(encoding="utf-8") if path.exists() else ""
    old = _parse(old_text, path)
    if table in old and not isinstance(old[table], dict):
        raise ConfigError(f"{path}: '{table}' is not a table; set {', '.join(values)} by hand.")
    if table in old and not _has_header(old_text, table):
        raise ConfigError(
            f"{path}: [{table}] is written inline, with dotted keys or only through sub-tables; "
            f"set {', '.join(values)} by hand."
        )
    new_text = _rewrite(old_text, table, values)
    new = _parse(new_text, path)
    expected = {k: dict(v) if isinstance(v, dict) else v for k, v in old.items()}
    expected.setdefault(table, {}).update(values)
    if new != expected:  # the edit must change exactly the named keys
        raise ConfigError(
            f"{path}: could not update [{table}] safely; set {', '.join(values)} by hand."
        )
    _write_atomically(path, new_text)


def _parse(text: str, path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"Config file {path} is not valid TOML: {exc}") from None


def _header_name(line: str) -> str | None:
    if _ARRAY_HEADER.match(line):
        return "[["  # an array of tables: a section boundary, never ours
    match = _HEADER.match(line)
    return match.group(1).replace(" ", "").strip("\"'") if match else None


def _has_header(text: str, table: str) -> bool:
    return any(_header_name(line) == table for line in text.splitlines())


def _format(value: float | str | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _rewrite(text: str, table: str, values: Mapping[str, float | str | bool]) -> str:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _header_name(line) == table), None)
    if start is None:
        block = [f"[{table}]", *(f"{k} = {_format(v)}" for k, v in values.items())]
        prefix = "\n".join(lines).rstrip("\n")
        return (prefix + "\n\n" if prefix else "") + "\n".join(block) + "\n"
    end = next(
        (i for i in range(start + 1, len(lines)) if _header_name(lines[i]) is not None), len(lines)
    )
    pending = dict(values)
    for i in range(start + 1, end):
        match = re.match(r"^(\s*)([A-Za-z0-9_\-]+)(\s*=\s*)([^#]*?)(\s*#.*)?$", lines[i])
        if match and match.group(2) in pending:
            indent, key, equals, _, comment = match.groups()
            lines[i] = f"{indent}{key}{equals}{_format(pending.pop(key))}{comment or ''}"
    # Keys not there yet go after the table's last non-blank line.
    insert_at = end
    while insert_at > start + 1 and not lines[insert_at - 1].strip():
        insert_at -= 1
    lines[insert_at:insert_at] = [f"{k} = {_format(v)}" for k, v in pending.items()]
    return "\n".join(lines) + "\n"


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
