"""Errors raised by crag.

Every message says what failed and what to do about it.

    CragError
    ├── ConfigError          a setting or component name is wrong
    ├── QueryError           the question cannot be asked (empty, too long)
    ├── IndexNotFoundError   no index where one was expected
    ├── IngestError          a file could not be read or indexed
    ├── GradeParseError      a model's grade could not be parsed
    ├── SearchError          the web search failed
    └── StepError            a component failed inside a workflow step, with no fallback
"""

from __future__ import annotations


class CragError(Exception):
    """Root of every error crag raises on purpose."""


class ConfigError(CragError):
    """A setting, component name or threshold is invalid."""


class QueryError(CragError):
    """The question is empty or otherwise unusable."""


class IndexNotFoundError(CragError):
    """No index exists at the given path."""


class IngestError(CragError):
    """A source file could not be read or indexed."""


class GradeParseError(CragError):
    """A language model's relevance grade could not be parsed."""


class SearchError(CragError):
    """The web search component failed."""


class StepError(CragError):
    """A component raised inside a workflow step and nothing could stand in for it."""

    def __init__(self, step: str, cause: BaseException) -> None:
        super().__init__(f"step '{step}' failed: {type(cause).__name__}: {cause}")
        self.step = step
