"""crag: an event-driven Corrective-RAG workflow engine on LlamaIndex workflows."""

from crag.config import Settings
from crag.errors import (
    ConfigError,
    CragError,
    GradeParseError,
    IndexNotFoundError,
    IngestError,
    QueryError,
    SearchError,
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
    "Grader",
    "IndexNotFoundError",
    "IngestError",
    "QueryError",
    "QueryRewriter",
    "Refiner",
    "Retriever",
    "SearchError",
    "Settings",
    "Source",
    "Strip",
    "Synthesizer",
    "Verdict",
    "WebSearch",
    "build_workflow",
    "ingest",
    "run_sync",
]
