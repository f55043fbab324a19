"""What a run retrieved and what its synthesizer read, for `crag eval` (runner.py).

Thin wrappers around a workflow's retriever and synthesizer (`instrument`) report to the
question being run (`observing`) through a context variable, which the engine's step tasks
inherit, so questions run concurrently each see their own.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from llama_index.core.schema import NodeWithScore

from crag.events import Strip


@dataclass
class Observation:
    """The first retrieval of a question's run, and the strips its synthesizer was given."""

    retrieved: list[NodeWithScore] | None = None
    context: list[Strip] | None = None


_current: contextvars.ContextVar[Observation | None] = contextvars.ContextVar(
    "crag_eval_observation", default=None
)


@contextmanager
def observing() -> Iterator[Observation]:
    """What the run started inside the block retrieves and reads, as it does."""
    observation = Observation()
    token = _current.set(observation)
    try:
        yield observation
    finally:
        _current.reset(token)


class RetrieverProbe:
    """Passes retrieval through, noting the first retrieval of the question being run."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def retrieve(self, query: str) -> list[NodeWithScore]:
        chunks = await self.inner.retrieve(query)
        observation = _current.get()
        if observation is not None and observation.retrieved is None:
            observation.retrieved = list(chunks)
        return chunks


class SynthesizerProbe:
    """Passes synthesis through, noting the strips the synthesizer was given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def synthesize(self, query: str, strips: Sequence[Strip]) -> Any:
        observation = _current.get()
        if observation is not None:
            observation.context = list(strips)
        return await self.inner.synthesize(query, strips)


def instrument(workflow: Any) -> Any:
    """Wrap the workflow's retriever and synthesizer, where it has them, with probes."""
    if hasattr(workflow, "retrieval"):  # CRAG's and plain RAG's: the retriever of its graded retrieval
        workflow.retrieval.retriever = RetrieverProbe(workflow.retrieval.retriever)
    if hasattr(workflow, "synthesizer"):
        workflow.synthesizer = SynthesizerProbe(workflow.synthesizer)
    return workflow
