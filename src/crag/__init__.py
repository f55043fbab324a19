"""crag: an event-driven Corrective-RAG workflow engine on LlamaIndex workflows."""

from crag.config import Settings
from crag.errors import (
    ConfigError,
    CragError,
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
from crag.factory import build_workflow
from crag.index import ChunkIndex, ingest
from crag.interfaces import Grader, QueryRewriter, Refiner, Retriever, Synthesizer, WebSearch
from crag.workflows import CorrectiveRAGWorkflow
from crag.workflows.corrective import run_sync

__all__ = [
    "ChunkIndex",
    "ConfigError",
    "CorrectiveRAGWorkflow",
    "CragError",
    "CragResult",
    "Grade",
    "GradeParseError",
    "ModelReplyError",
    "Grader",
    "IndexNotFoundError",
    "IngestError",
    "QueryError",
    "QueryRewriter",
    "Refiner",
    "Retriever",
    "SearchError",
    "StepError",
    "Settings",
    "Source",
    "Strip",
    "Synthesizer",
    "TraceError",
    "Verdict",
    "WebSearch",
    "build_workflow",
    "ingest",
    "run_sync",
]
