"""Jupyter notebooks (.ipynb): one Document per Markdown or code cell, outputs left out.

Outputs are results of a run (tables of numbers, tracebacks, images) rather than what the
author wrote; a cell's own text is what a question about the notebook is answered from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from llama_index.core.schema import Document

from crag.errors import IngestError
from crag.ingestion.formats import decode_text, doc_id, require_bytes

_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def read_notebook(path: Path, data: bytes) -> Iterator[Document]:
    """One Document per non-empty cell; `cell` is its 1-based number in the notebook."""
    require_bytes(path, data, "notebook")
    cells = _cells(path, decode_text(path, data))
    title = next((m.group(1) for kind, text in cells if kind == "markdown"
                  for m in [_HEADING.search(text)] if m), path.stem)
    number = 0
    for index, (kind, text) in enumerate(cells, start=1):
        if not text.strip():
            continue
        metadata = {"title": title, "file_name": path.name, "cell": index, "cell_type": kind}
        yield Document(text=text.strip(), id_=doc_id(path, number), metadata=metadata)
        number += 1


def _cells(path: Path, text: str) -> list[tuple[str, str]]:
    """(cell type, source) of every cell."""
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as exc:
        raise IngestError(f"{path} is not a readable notebook (broken JSON at line {exc.lineno}: "
                          f"{exc.msg}); open and save it in Jupyter again.") from None
    except RecursionError:
        raise IngestError(f"{path} is not a readable notebook (JSON nested too deeply).") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise IngestError(f"{path} is not a readable notebook (no list of cells; nbformat 4 "
                          "expected); open and save it in a current Jupyter.")
    found = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("markdown", "code", "raw"):
            continue
        source = cell.get("source", "")
        source = "".join(s for s in source if isinstance(s, str)) if isinstance(source, list) else source
        found.append((cell["cell_type"], source if isinstance(source, str) else ""))
    return found
