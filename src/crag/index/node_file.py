"""The chunks of one index version: one JSON line each, read one at a time by byte offset."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from llama_index.core.schema import TextNode

from crag.errors import IndexNotFoundError
from crag.index.layout import read_array


class Positional(Sequence[TextNode]):
    """A sequence of chunks read one at a time: `_at(position)` reads one; slices and negative
    positions are handled here, once for every such store."""

    def _at(self, position: int) -> TextNode:
        raise NotImplementedError

    def __getitem__(self, position: int) -> TextNode:  # type: ignore[override]
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]  # type: ignore[return-value]
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(position)
        return self._at(position)


class NodeFile(Positional):
    """The chunks of one version, each parsed from its own line when it is asked for."""

    def __init__(self, folder: Path, index: Path) -> None:
        self._file = folder / "nodes.jsonl"
        self._offsets = read_array(folder / "offsets.npy")
        self._index = index  # the index folder, named in errors
        self._fd: int | None = None

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def _at(self, position: int) -> TextNode:
        if self._fd is None:
            self._fd = os.open(self._file, os.O_RDONLY)
        start, end = int(self._offsets[position]), int(self._offsets[position + 1])
        return self._parse(os.pread(self._fd, end - start, start), position)

    def __iter__(self) -> Iterator[TextNode]:
        with open(self._file, "rb") as f:
            for position in range(len(self)):
                yield self._parse(f.readline(), position)

    def _parse(self, line: bytes, position: int) -> TextNode:
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ValueError
            return TextNode.from_dict(record)
        except (ValueError, TypeError, KeyError, AttributeError):  # also UnicodeDecodeError
            problem = f"is unreadable (nodes.jsonl line {position + 1} is not a chunk)"
            raise IndexNotFoundError.damaged(self._index, problem) from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def write_nodes(nodes: Sequence[TextNode], folder: Path) -> None:
    offsets = np.zeros(len(nodes) + 1, dtype=np.int64)
    with open(folder / "nodes.jsonl", "wb") as f:
        for position, node in enumerate(nodes):
            line = (json.dumps(node.to_dict(), ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
            f.write(line)
            offsets[position + 1] = offsets[position] + len(line)
    np.save(folder / "offsets.npy", offsets)


