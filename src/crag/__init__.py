"""crag: an event-driven Corrective-RAG workflow engine on LlamaIndex workflows.

Names are imported on first use (PEP 562), so `import crag` and `crag --help` stay cheap:
llama-index, the models and the stores load only when something needs them.
"""

from __future__ import annotations

from importlib import import_module as _import_module
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from crag import display as _display

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
    "QueryRejected": "crag.errors",
    "ReplyCutOff": "crag.errors",
    "SearchError": "crag.errors",
    "StepError": "crag.errors",
    "TraceError": "crag.errors",
    "Bridge": "crag.events",
    "CragResult": "crag.events",
    "Grade": "crag.events",
    "Source": "crag.events",
    "Strip": "crag.events",
    "Verdict": "crag.events",
    "ChunkIndex": "crag.index",
    "ingest": "crag.ingestion",
    "BridgeFinder": "crag.interfaces",
    "Decomposer": "crag.interfaces",
    "Grader": "crag.interfaces",
    "QueryRewriter": "crag.interfaces",
    "Refiner": "crag.interfaces",
    "Retriever": "crag.interfaces",
    "Synthesizer": "crag.interfaces",
    "WebSearch": "crag.interfaces",
    "CorrectiveRAGWorkflow": "crag.workflows",
    "build_workflow": "crag.workflows.factory",
    "run_sync": "crag._offload",
    "settle_heap": "crag._offload",
}

__all__ = [
    "Bridge",
    "BridgeFinder",
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
    "QueryRejected",
    "QueryRewriter",
    "Refiner",
    "ReplyCutOff",
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
    "settle_heap",
]


def _run_html(result: _Any) -> str | None:
    from crag.app.render.notebook import run_html  # drawing is the app's; loaded when shown

    return run_html(result)


def _workflow_html(workflow: _Any) -> str:
    from crag.app.render.notebook import workflow_html

    return workflow_html(workflow)


# Notebooks show runs and workflows through these: the low modules that define them ask
# crag.display by kind, so none imports the app's drawing code.
_display.register_html("run", _run_html)
_display.register_html("workflow", _workflow_html)


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
    from crag._offload import run_sync, settle_heap
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
        QueryRejected,
        ReplyCutOff,
        SearchError,
        StepError,
        TraceError,
    )
    from crag.events import Bridge, CragResult, Grade, Source, Strip, Verdict
    from crag.index import ChunkIndex
    from crag.ingestion import ingest
    from crag.interfaces import (
        BridgeFinder,
        Decomposer,
        Grader,
        QueryRewriter,
        Refiner,
        Retriever,
        Synthesizer,
        WebSearch,
    )
    from crag.workflows import CorrectiveRAGWorkflow
    from crag.workflows.factory import build_workflow
