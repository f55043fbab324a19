"""Chunks kept on disk while an ingest runs, one JSON line each, read back one at a time.

A chunk held as a llama-index node costs 3 to 10 KB of memory (its metadata is copied into each
of its relationships): the 62,202 chunks of two 31 MB corpora with 440-character URLs took the
ingest to 1,269 MB. Written to an unnamed file in the index folder as it is cut, a chunk costs
an offset.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from llama_index.core.schema import BaseNode, TextNode

from crag.index.node_file import Positional


class SpilledNodes(Positional):
    """Nodes appended to a temporary file in `folder` (gone when closed, or when the process ends)."""

    def __init__(self, folder: Path) -> None:
        self._file = tempfile.TemporaryFile(dir=folder, buffering=0)  # noqa: SIM115 - closed by close()
        self._offsets = [0]

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def _at(self, position: int) -> TextNode:
        start, end = self._offsets[position], self._offsets[position + 1]
        return TextNode.from_dict(json.loads(os.pread(self._file.fileno(), end - start, start)))

    def __iter__(self) -> Iterator[TextNode]:
        for position in range(len(self)):
            yield self[position]

    def extend(self, nodes: Sequence[BaseNode]) -> None:
        lines = [(json.dumps(n.to_dict(), ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass") for n in nodes]
        self._file.seek(self._offsets[-1])
        self._file.write(b"".join(lines))
        for line in lines:
            self._offsets.append(self._offsets[-1] + len(line))

    def truncate(self, length: int) -> None:
        """Keep the first `length` nodes."""
        del self._offsets[length + 1:]
        self._file.truncate(self._offsets[-1])

    def close(self) -> None:
        self._file.close()


class Chained(Positional):
    """Two sequences of nodes read as one."""

    def __init__(self, first: Sequence[TextNode], second: Sequence[TextNode]) -> None:
        self.first, self.second = first, second

    def __len__(self) -> int:
        return len(self.first) + len(self.second)

    def _at(self, position: int) -> TextNode:
        return self.first[position] if position < len(self.first) else self.second[position - len(self.first)]

    def __iter__(self) -> Iterator[TextNode]:
        yield from self.first
        yield from self.second
