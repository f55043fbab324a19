"""crag: an event-driven Corrective-RAG workflow engine on LlamaIndex workflows.

Names are imported on first use (PEP 562), so `import crag` and `crag --help` stay cheap:
llama-index, the models and the stores load only when something needs them.
"""

from __future__ import annotations

from importlib import import_module as _import_module
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

_WHERE = {
    "Settings": "crag.config",
    "ConfigError": "crag.errors",
    "CragError": "crag.errors",
    "GradeParseError": "crag.errors",
    "DecomposeParseError": "crag.errors",
    "IndexNotFoundError": "crag.errors",
    "IngestError": "crag.errors",
    "ModelReplyError": "crag.errors",
    "QueryError": "crag.errors",
    "SearchError": "crag.errors",
    "StepError": "crag.errors",
    "TraceError": "crag.errors",
    "CragResult": "crag.events",
    "Grade": "crag.events",
    "Source": "crag.events",
    "Strip": "crag.events",
    "Verdict": "crag.events",
    "ChunkIndex": "crag.index",
    "ingest": "crag.ingestion",
    "Decomposer": "crag.interfaces",
    "Grader": "crag.interfaces",
    "QueryRewriter": "crag.interfaces",
    "Refiner": "crag.interfaces",
    "Retriever": "crag.interfaces",
    "Synthesizer": "crag.interfaces",
    "WebSearch": "crag.interfaces",
    "CorrectiveRAGWorkflow": "crag.workflows",
    "build_workflow": "crag.workflows.factory",
    "run_sync": "crag.workflows.corrective",
}

__all__ = [
    "ChunkIndex",
    "ConfigError",
    "CorrectiveRAGWorkflow",
    "CragError",
    "CragResult",
    "DecomposeParseError",
    "Decomposer",
    "Grade",
    "GradeParseError",
    "Grader",
    "IndexNotFoundError",
    "IngestError",
    "ModelReplyError",
    "QueryError",
    "QueryRewriter",
    "Refiner",
    "Retriever",
    "SearchError",
    "Settings",
    "Source",
    "StepError",
    "Strip",
    "Synthesizer",
    "TraceError",
    "Verdict",
    "WebSearch",
    "build_workflow",
    "ingest",
    "run_sync",
]


def __getattr__(name: str) -> _Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'crag' has no attribute {name!r}")
    value = getattr(_import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*(n for n in globals() if n.startswith('_')), *__all__})


if _TYPE_CHECKING:
    from crag.config import Settings
    from crag.errors import (
        ConfigError,
        CragError,
        DecomposeParseError,
        GradeParseError,
        IndexNotFoundError,
        IngestError,
        ModelReplyError,
        QueryError,
        SearchError,
        StepError,
        TraceError,
    )
    from crag.events import CragResult, Grade, Source, Strip, Verdict
    from crag.index import ChunkIndex
    from crag.ingestion import ingest
    from crag.interfaces import Decomposer, Grader, QueryRewriter, Refiner, Retriever, Synthesizer, WebSearch
    from crag.workflows import CorrectiveRAGWorkflow
    from crag.workflows.corrective import run_sync
    from crag.workflows.factory import build_workflow
