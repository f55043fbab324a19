"""Readers for more file types, named in crag.toml or passed to `crag.ingest(readers=...)`:

    [ingest]
    readers = { ".log" = "mypkg.logs:read_log" }

`read_log(path)` returns or yields Documents or text; crag gives each its id
(`path`, `path#1`, ...) and `file_name`, so it is cited and replaced as a built-in reader's are.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from llama_index.core.schema import Document

from crag.errors import ConfigError, IngestError
from crag.ingestion.formats import doc_id
from crag.ingestion.readers import Reader

UserReader = Callable[[Path], "Iterable[Document | str] | Document | str"]


def load_readers(readers: Mapping[str, str | UserReader]) -> dict[str, Reader]:
    """Crag readers for `readers` (suffix -> "module:function" or the function itself); a
    target that cannot be imported is a `ConfigError` naming it."""
    loaded: dict[str, Reader] = {}
    for suffix, target in readers.items():
        function = _import(suffix, target) if isinstance(target, str) else target
        if not callable(function):
            raise ConfigError(f'ingest.readers: "{suffix}" = {target!r} is not a function.')
        name = target if isinstance(target, str) else getattr(target, "__qualname__", repr(target))
        loaded[suffix.lower()] = _adapt(function, name)
    return loaded


def _import(suffix: str, target: str) -> object:
    module_name, _, attribute = target.partition(":")
    where = f'ingest.readers: "{suffix}" = "{target}"'
    if not module_name or not attribute:
        raise ConfigError(f'{where}: write the reader as "module:function".')
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{where}: cannot import {module_name} ({exc}); install it or fix "
                          "the name.") from None
    except Exception as exc:  # noqa: BLE001 - the module's own code failed as it loaded
        raise ConfigError(f"{where}: importing {module_name} failed ({type(exc).__name__}: {exc}).") from None
    found: object = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ConfigError(f"{where}: {module_name} has no {attribute}.")
        found = getattr(found, part)
    return found


def _adapt(function: UserReader, name: str) -> Reader:
    def read(path: Path, data: bytes) -> Iterator[Document]:
        try:
            result = function(path)
            items = [result] if isinstance(result, (str, Document)) else list(result)
        except IngestError:
            raise
        except Exception as exc:  # noqa: BLE001 - a user's reader may raise anything
            first = str(exc).splitlines()[0][:200] if str(exc) else ""
            raise IngestError(f"{path}: the reader {name} failed ({type(exc).__name__}"
                              f"{': ' + first if first else ''}).") from None
        number = 0
        for item in items:
            if isinstance(item, str):
                item = Document(text=item)
            elif not isinstance(item, Document):
                raise IngestError(f"{path}: the reader {name} gave a {type(item).__name__}; "
                                  "it must give Documents or text.")
            if not item.text.strip():
                continue
            metadata = {"title": path.stem, **item.metadata, "file_name": path.name}
            yield Document(text=item.text, id_=doc_id(path, number), metadata=metadata)
            number += 1

    return read
