"""Ingest as the settings say: the ingest's wiring, the one place `crag ingest` and `crag mcp`'s
ingest tool turn settings into an ingest (the index's own chunker kept, summaries when asked for,
the vector store and the readers named in crag.toml).

Below it nothing reads `Settings`: readers, chunkers, summarizers and the pipeline take plain
arguments, which this module reads from the settings. It also turns `[llm]` and `[vector_store]`
into the model's and the index's options for `crag.workflows.factory`, the query's wiring.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from llama_index.core.node_parser import NodeParser
from pydantic import BaseModel

from crag.config import Settings
from crag.index import VectorStoreOptions
from crag.index.store import recorded_chunker
from crag.ingestion.chunkers import node_parser
from crag.ingestion.files import ReadLimits
from crag.ingestion.pipeline import IngestReport, ProgressCallback, Summarizer, ingest
from crag.models import LLMFactory, LLMOptions

O = TypeVar("O")


def ingest_with_settings(
    paths: Sequence[str | Path], settings: Settings, progress: ProgressCallback | None = None
) -> IngestReport:
    """Add `paths` to the index `settings.index.path` names, as `settings` say."""
    from crag.ingestion.chunkers.agentic import AgenticChunker

    settings = keep_recorded_chunker(settings, recorded_chunker(settings.index.path))
    parser, chunker = node_parser_for(settings)
    if isinstance(parser, AgenticChunker):  # it counts documents as it goes
        parser.progress = progress
    summarize = summarizer_for(settings, progress) if settings.index.summaries else None
    return ingest(
        list(paths),
        settings.index.path,
        chunk_size=settings.index.chunk_size,
        chunk_overlap=settings.index.chunk_overlap,
        progress=progress,
        node_parser=parser,
        chunker=chunker,
        summarize=summarize,
        vector_store=vector_store_options(settings),
        readers=settings.ingest.readers_to_run(),  # refused if found with the documents
        limits=read_limits(settings),
    )


def node_parser_for(settings: Settings) -> tuple[NodeParser, str]:
    """The parser `[index] chunker` names, and its signature (`crag.ingestion.chunkers.node_parser`)."""
    index = settings.index
    return node_parser(
        index.chunker,
        chunk_size=index.chunk_size,
        chunk_overlap=index.chunk_overlap,
        window_size=index.window_size,
        agentic_threshold=index.agentic_threshold,
        agentic_pronouns=index.agentic_pronouns,
        llms=LLMFactory(llm_options(settings)),
    )


def summarizer_for(settings: Settings, progress: ProgressCallback | None = None) -> Summarizer:
    """The summarizer `crag ingest --summaries` uses: the model's when one is configured."""
    from crag.ingestion.summaries import ExtractiveSummarizer, LLMSummarizer  # loaded when asked

    llm = llm_options(settings)
    if llm.configured:
        return LLMSummarizer(LLMFactory(llm).llm, progress=progress)
    return ExtractiveSummarizer()


def options_of(kind: type[O], section: BaseModel, **given: Any) -> O:
    """A component's options (`kind`, a dataclass) from the settings `section` holding each of
    its fields by the same name; `given` sets the fields the section words otherwise. A field a
    section lacks is an `AttributeError` here, not a default silently kept."""
    names = {f.name for f in dataclasses.fields(kind)} - given.keys()  # type: ignore[arg-type]
    return kind(**{name: getattr(section, name) for name in names}, **given)


def llm_options(settings: Settings) -> LLMOptions:
    """`[llm]`, as the chat model's options (the prices and reply limits go to the workflow)."""
    return options_of(LLMOptions, settings.llm)


def vector_store_options(settings: Settings) -> VectorStoreOptions:
    """`[vector_store]`, as the index's options."""
    return options_of(VectorStoreOptions, settings.vector_store)


def read_limits(settings: Settings) -> ReadLimits:
    """`[ingest]`'s bounds on reading a file, as the readers' limits (its `readers` go apart)."""
    return options_of(ReadLimits, settings.ingest)


CHUNKING_SETTINGS = frozenset(
    {"chunker", "chunk_size", "chunk_overlap", "window_size", "agentic_threshold", "agentic_pronouns"}
)


def keep_recorded_chunker(settings: Settings, recorded: str) -> Settings:
    """`settings` with the chunking an index `recorded`, unless the chunking was set explicitly
    (flag, file or environment): adding a file must not re-chunk the whole index."""
    if not recorded or settings.index.model_fields_set & CHUNKING_SETTINGS:
        return settings
    kind, _, rest = recorded.partition(":")
    values = rest.split(":")
    try:
        if kind == "sentence":
            update = {"chunker": "sentence", "chunk_size": int(values[0]), "chunk_overlap": int(values[1])}
        elif kind == "sentence_window":
            update = {"chunker": "sentence_window", "window_size": int(values[0])}
        elif kind == "agentic" and values[0] == "offline":
            update = {"chunker": "agentic", "agentic_threshold": float(values[1]), "chunk_size": int(values[2]),
                      "agentic_pronouns": values[3] == "pronouns"}
        elif kind == "agentic":  # agentic:llm:MODEL:THRESHOLD:SIZE
            update = {"chunker": "agentic", "agentic_threshold": float(values[-2]), "chunk_size": int(values[-1])}
        else:
            return settings
    except (IndexError, ValueError):  # a signature this crag does not know: chunk as configured
        return settings
    return settings.model_copy(update={"index": settings.index.model_copy(update=update)})
