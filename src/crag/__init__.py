"""crag: an event-driven Corrective-RAG workflow engine on LlamaIndex workflows.

Names are imported on first use (PEP 562), so `import crag` and `crag --help` stay cheap:
llama-index, the models and the stores load only when something needs them.
"""

from __future__ import annotations

from importlib import import_module as _import_module
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from crag import display as _display

# The public names, by the module that defines each: the one list. `__all__`, `dir(crag)` and
# the lookup on first use read it; the imports for type checkers at the end must match it
# (tests/test_public_api.py).
_EXPORTS = {
    "crag._offload": ("run_sync", "settle_heap"),
    "crag.config": ("Settings",),
    "crag.errors": (
        "ConfigError", "CragError", "DecomposeParseError", "GradeParseError", "IndexNotFoundError",
        "IngestError", "ModelReplyError", "QueryError", "QueryRejected", "ReplyCutOff",
        "RerankError", "SearchError", "StepError", "TraceError",
    ),
    "crag.events": ("Bridge", "CragResult", "Grade", "Source", "Strip", "Verdict"),
    "crag.index": ("ChunkIndex",),
    "crag.ingestion": ("ingest",),
    "crag.interfaces": (
        "BridgeFinder", "Decomposer", "Grader", "QueryRewriter", "Refiner", "Reranker", "Retriever",
        "Synthesizer", "WebSearch",
    ),
    "crag.workflows": ("CorrectiveRAGWorkflow",),
    "crag.workflows.factory": ("build_workflow",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = list(_WHERE)


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


if _TYPE_CHECKING:  # `X as X`: a re-export, as type checkers cannot read a computed `__all__`
    from crag._offload import run_sync as run_sync
    from crag._offload import settle_heap as settle_heap
    from crag.config import Settings as Settings
    from crag.errors import ConfigError as ConfigError
    from crag.errors import CragError as CragError
    from crag.errors import DecomposeParseError as DecomposeParseError
    from crag.errors import GradeParseError as GradeParseError
    from crag.errors import IndexNotFoundError as IndexNotFoundError
    from crag.errors import IngestError as IngestError
    from crag.errors import ModelReplyError as ModelReplyError
    from crag.errors import QueryError as QueryError
    from crag.errors import QueryRejected as QueryRejected
    from crag.errors import ReplyCutOff as ReplyCutOff
    from crag.errors import RerankError as RerankError
    from crag.errors import SearchError as SearchError
    from crag.errors import StepError as StepError
    from crag.errors import TraceError as TraceError
    from crag.events import Bridge as Bridge
    from crag.events import CragResult as CragResult
    from crag.events import Grade as Grade
    from crag.events import Source as Source
    from crag.events import Strip as Strip
    from crag.events import Verdict as Verdict
    from crag.index import ChunkIndex as ChunkIndex
    from crag.ingestion import ingest as ingest
    from crag.interfaces import BridgeFinder as BridgeFinder
    from crag.interfaces import Decomposer as Decomposer
    from crag.interfaces import Grader as Grader
    from crag.interfaces import QueryRewriter as QueryRewriter
    from crag.interfaces import Refiner as Refiner
    from crag.interfaces import Reranker as Reranker
    from crag.interfaces import Retriever as Retriever
    from crag.interfaces import Synthesizer as Synthesizer
    from crag.interfaces import WebSearch as WebSearch
    from crag.workflows import CorrectiveRAGWorkflow as CorrectiveRAGWorkflow
    from crag.workflows.factory import build_workflow as build_workflow
