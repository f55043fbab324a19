"""Typed events that flow between the workflow's steps, and the result a run returns."""

from __future__ import annotations

from enum import Enum
from typing import Literal

from llama_index.core.schema import NodeWithScore
from pydantic import BaseModel, Field
from workflows.events import Event, StartEvent

from crag.cost import CostRecord
from crag.trace import Location, RunTrace, StepRecord


class Verdict(str, Enum):
    """The CRAG paper's three retrieval verdicts."""

    CORRECT = "correct"
    INCORRECT = "incorrect"
    AMBIGUOUS = "ambiguous"

    def __str__(self) -> str:  # print(result.verdict) says "correct", as f-strings do
        return self.value


class Grade(BaseModel):
    """Relevance of one retrieved chunk to the query."""

    chunk_id: str
    score: float = Field(ge=0.0, le=1.0, description="Relevance in [0, 1]; higher is more relevant.")
    grader: str = Field(description="Which component produced the score.")
    note: str | None = Field(default=None, description="Why a fallback was used, if one was.")
    cached: bool = Field(default=False, description="Read from the grade cache: no model call made.")


class Strip(Location):
    """A small piece of knowledge (one to a few sentences) that keeps its source (and where in
    its file it sits)."""

    text: str
    source_id: str
    kind: Literal["internal", "web"]
    score: float = 0.0
    doc_id: str | None = None
    title: str | None = None
    url: str | None = None
    hop: int = Field(0, description="Which hop found it: 0 the question itself, 1 on its sub-questions.")
    leads: bool = Field(False, description="It answers what its hop asked of a bridge: the answer starts with it.")
    defines: bool = Field(False, description="It defines a term of the question (\"Cynic: A blackguard...\"): "
                          "first among strips of equal score.")


class Bridge(BaseModel):
    """A second hop for a question the first hop answered only in part: the thing the first
    hop's best strip names, which the question describes instead (`crag.steps.bridging`)."""

    entity: str = Field(description="A name in the first hop's best strips that the question does not have.")
    found_in: str | None = Field(default=None, description="The title of the strip it was read from.")
    residual: str = Field(description="The question's words the first hop's best strips did not cover.")
    query: str = Field(description="What the second hop retrieves and searches with: the entity and the residual.")
    graded_against: str = Field(description="What its chunks are graded against: the question and the entity.")


class Source(Location):
    """A document that contributed to the answer, numbered as cited; `citation()` says where
    in its file ("handbook.pdf, p. 12") for a page, slide, cell or rows of a document."""

    number: int
    kind: Literal["internal", "web"]
    id: str = Field(description="The chunk (internal) or result (web) id.")
    text: str = Field(description="The strips of this source that reached the answer.")
    doc_id: str | None = Field(default=None, description="The ingested document the chunk came from.")
    title: str | None = None
    url: str | None = None

    def label(self) -> str:
        """One line to find it by: its URL, else its file and page, else its title or id."""
        return self.url or self.citation() or self.title or self.id


class CragResult(BaseModel):
    """What one run of the corrective workflow returns."""

    query: str
    answer: str
    verdict: Verdict
    grades: list[Grade]
    sources: list[Source]
    rewritten_query: str | None = None
    timings: dict[str, float] = Field(default_factory=dict, description="Seconds per step.")
    steps: list[str] = Field(default_factory=list, description="Steps that ran, in finishing order.")
    trace: RunTrace = Field(default_factory=RunTrace, description="The run's path, times and calls.")
    degraded: list[str] = Field(
        default_factory=list, description="Failures worked around in this run (empty when none)."
    )
    cost: CostRecord = Field(default_factory=CostRecord, description="Model calls, tokens and money.")

    def __repr__(self) -> str:
        """One line: the workflow engine summarizes every step's output with it, and a person
        reading a log wants the verdict and the answer, not the whole trace."""
        answer = self.answer if len(self.answer) <= 80 else self.answer[:77] + "..."
        return (f"CragResult(verdict={self.verdict.value!r}, answer={answer!r}, "
                f"sources={len(self.sources)}, degraded={len(self.degraded)})")

    def _repr_html_(self) -> str | None:
        """In Jupyter, the run explained: why its verdict, its answer and sources, its path on
        the corrective workflow's graph (inline HTML and SVG, nothing fetched)."""
        from crag.display import html

        return html("run", self)


class Turn(BaseModel):
    """One earlier turn of a conversation: what the user asked, or what was answered."""

    role: Literal["user", "assistant"]
    content: str


class QueryStartEvent(StartEvent):
    """Starts a run: `await workflow.run(query=...)`; `history` (earlier turns, oldest first)
    makes `query` a follow-up, made standalone before retrieval."""

    query: str
    history: list[Turn] = Field(default_factory=list)


class CandidatesEvent(Event):
    """What the retriever found, before the postprocessing stages."""

    query: str
    chunks: list[NodeWithScore]


class RetrievedEvent(Event):
    """The chunks to judge: the retriever's, after the postprocessing stages (if any)."""

    query: str
    chunks: list[NodeWithScore]


class RefineInternalEvent(Event):
    """Kept internal chunks, to be refined into strips (Correct and Ambiguous)."""

    query: str
    chunks: list[NodeWithScore]


class RewriteQueryEvent(Event):
    """Asks for a web search query; sent alongside grading, so it is ready if the web is needed."""

    query: str


class RewrittenQueryEvent(Event):
    query: str
    search_query: str


class WebSearchNeededEvent(Event):
    """Internal knowledge is insufficient: search the web (Incorrect and Ambiguous)."""

    query: str
    fallback: list[NodeWithScore] = Field(
        default_factory=list, description="Chunks to answer from if the search fails (Incorrect runs)."
    )


class WebResultsEvent(Event):
    query: str
    results: list[NodeWithScore]


class InternalKnowledgeEvent(Event):
    strips: list[Strip]


class WebKnowledgeEvent(Event):
    strips: list[Strip]


class KnowledgeEvent(Event):
    """Every strip the answer may use: the first pass's and those of any further hops."""

    strips: list[Strip]


class StepProgressEvent(Event):
    """Written to the event stream when a step starts or finishes."""

    step: str
    status: Literal["started", "finished"]
    seconds: float | None = None
    record: StepRecord | None = Field(default=None, description="The finished step's trace record.")


class AnswerDeltaEvent(Event):
    """Written to the event stream as the answer is produced: the next piece of its text.

    Joined in order, a run's deltas are its answer (`CragResult.answer`), citations `[n]`
    included. A synthesizer that fails mid-answer is followed by a delta with `restart`
    set: what was streamed so far is void, and the fallback's answer follows whole.
    """

    delta: str
    restart: bool = Field(default=False, description="Discard the deltas so far: a fallback answer follows.")
