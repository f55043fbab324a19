"""One Protocol per swappable step of the corrective workflow, and one per optional hook.

Any object with the right async method plugs in; nothing needs to inherit from crag.
LlamaIndex's own types (`NodeWithScore`) are used at the seams so its ecosystem fits.
A component may also offer a hook the workflow uses when it is there: `WarmsUp` (load now,
not in the first run), `PreparesStrips` (a refiner's speculative scoring), `MayBeUnconfigured`
(a web search that is switched off, and says so).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, runtime_checkable

from llama_index.core.schema import NodeWithScore

from crag.events import Bridge, Grade, Source, Strip, Turn


@runtime_checkable
class Retriever(Protocol):
    """Finds candidate chunks in the user's own documents."""

    async def retrieve(self, query: str) -> list[NodeWithScore]: ...


@runtime_checkable
class Postprocessor(Protocol):
    """Filters, reorders, rescores or rewrites retrieved chunks before they are graded."""

    async def postprocess(self, query: str, chunks: Sequence[NodeWithScore]) -> list[NodeWithScore]: ...


@runtime_checkable
class Grader(Protocol):
    """Scores every chunk's relevance to the query in [0, 1]: a grade a threshold can judge, not a rank."""

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]: ...


@runtime_checkable
class Reranker(Protocol):
    """A cross-encoder's judgment of how well each document answers the query: one score in
    [0, 1] per document, in the documents' order (not sorted). One call is one request to a
    rerank server (or one batch of a local model); `RerankError` when it cannot give every score."""

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]: ...


@runtime_checkable
class CoverageJudge(Protocol):
    """Judges a set: how much of the question the (text, title) pairs cover together, in [0, 1].

    Synchronous and CPU-bound (the workflow runs it off the event loop)."""

    def coverage(self, query: str, texts: Sequence[tuple[str, str | None]]) -> float: ...


@runtime_checkable
class Refiner(Protocol):
    """Decomposes documents into strips, keeps the relevant ones, recomposes them in order."""

    async def refine(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Strip]: ...


@runtime_checkable
class Decomposer(Protocol):
    """Finds a compound question's hops: the parts a comparison names, and a bridge's next one."""

    async def split(self, query: str) -> list[str]:
        """One sub-question per thing a comparison names; [] for a question that names one."""
        ...

    async def follow_up(self, query: str, found: Sequence[Strip]) -> list[str]:
        """The next hop's questions from what the first hop found; [] when there is none."""
        ...


@runtime_checkable
class BridgeFinder(Protocol):
    """Finds the second hop of a question that the first hop answered only in part: the names
    its best strips hold that the question does not; [] when it answered the whole question."""

    async def bridges(self, query: str, found: Sequence[Strip]) -> list[Bridge]: ...


@runtime_checkable
class QueryRewriter(Protocol):
    """Turns a question into a query for web search."""

    async def rewrite(self, query: str) -> str: ...


@runtime_checkable
class WebSearch(Protocol):
    """Searches outside the user's documents; each result's metadata carries its `url`."""

    async def search(self, query: str) -> list[NodeWithScore]: ...


@runtime_checkable
class WarmsUp(Protocol):
    """Loads what it would otherwise load in its first step (`build_workflow` calls it)."""

    def warm_up(self) -> None: ...


@runtime_checkable
class PreparesStrips(Protocol):
    """A refiner that can score the retrieved chunks' strips while they are graded, so that
    refining after the verdict only selects."""

    async def prepare(self, query: str, chunks: Sequence[NodeWithScore]) -> None: ...


@runtime_checkable
class MayBeUnconfigured(Protocol):
    """A web search that may be switched off (`configured` False): the run then does not search,
    and its explanation and `degraded` list say why."""

    configured: bool


def web_configured(search: object) -> bool:
    """False only for a web search that says it is switched off."""
    return not isinstance(search, MayBeUnconfigured) or search.configured


@runtime_checkable
class Synthesizer(Protocol):
    """Writes the answer from refined strips; returns the answer and the sources it cites."""

    async def synthesize(self, query: str, strips: Sequence[Strip]) -> tuple[str, list[Source]]: ...


@runtime_checkable
class StreamingSynthesizer(Protocol):
    """A `Synthesizer` that can also write its answer piece by piece (optional: the workflow
    streams through `stream` when a synthesizer has it, and calls `synthesize` otherwise).

    `stream` yields the answer's text in order; once it is exhausted, `sources_for(answer)`
    gives the sources that answer cites, numbered as in the text.
    """

    def stream(self, query: str, strips: Sequence[Strip]) -> AsyncIterator[str]: ...

    def sources_for(self, answer: str, strips: Sequence[Strip]) -> list[Source]: ...


@runtime_checkable
class QueryCondenser(Protocol):
    """Makes a follow-up question standalone from the conversation's earlier turns."""

    async def condense(self, query: str, history: Sequence[Turn]) -> str: ...
