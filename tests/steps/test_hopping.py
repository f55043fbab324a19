"""A compound question's further hops: planned, graded as the question was, searched on the
web when the documents miss them, and never the reason a run fails."""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.schema import NodeWithScore, TextNode

from crag.events import Grade, Strip, Verdict
from crag.steps.decomposition import RuleDecomposer
from crag.steps.graded_retrieval import GradedRetrieval
from crag.steps.hopping import HopPlanner
from crag.trace import StepRecord

QUESTION = "Who was born earlier, Thomas Wolfe or Ada Lovelace?"


def passage(title: str, text: str) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=f"{title}:{text}", text=text, metadata={"title": title}), score=1.0)


class ByTitle:
    """Finds each title's passage when the query names it."""

    def __init__(self, *passages: NodeWithScore) -> None:
        self.passages = passages
        self.asked: list[str] = []

    async def retrieve(self, query: str) -> list[NodeWithScore]:
        self.asked.append(query)
        return [p for p in self.passages if p.node.metadata["title"] in query]


class Certain:
    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        return [Grade(chunk_id=c.node.node_id, score=0.9, grader="certain") for c in chunks]


class EachChunkAStrip:
    async def refine(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Strip]:
        return [Strip(text=c.node.get_content(), source_id=c.node.node_id, kind="internal", score=c.score or 0.0,
                      doc_id=c.node.node_id, title=c.node.metadata.get("title")) for c in chunks]


class Down:
    configured = True

    async def search(self, query: str) -> list[NodeWithScore]:
        raise ConnectionError("search API unreachable")


def strip(title: str, text: str) -> Strip:
    return Strip(text=text, source_id=f"{title}:{text}", doc_id=f"{title}:{text}", kind="internal", title=title)


def hop_record() -> StepRecord:
    return StepRecord(name="hop", input_event="InternalKnowledgeEvent", started=0.0)


def planner(retriever: ByTitle, **kwargs: object) -> HopPlanner:
    retrieval = GradedRetrieval(retriever, Certain(), upper=0.7, lower=0.3)
    return HopPlanner(retrieval, EachChunkAStrip(), Down(), **kwargs)  # type: ignore[arg-type]


def test_with_neither_a_decomposer_nor_a_bridger_nothing_is_planned() -> None:
    assert not planner(ByTitle()).active
    assert planner(ByTitle(), decomposer=RuleDecomposer()).active


async def test_a_comparisons_part_that_no_strip_is_about_gets_a_hop_of_its_own() -> None:
    retriever = ByTitle(passage("Ada Lovelace", "Ada Lovelace was born in 1815."))
    record = hop_record()
    first = [strip("Thomas Wolfe", "Thomas Wolfe was born in 1900.")]
    strips = await planner(retriever, decomposer=RuleDecomposer()).follow(QUESTION, Verdict.AMBIGUOUS, first, record)
    assert retriever.asked == ["Who was born earlier, Ada Lovelace?"]  # Thomas Wolfe's part was found
    assert [(s.title, s.hop) for s in strips] == [("Thomas Wolfe", 1), ("Ada Lovelace", 2)]
    assert [line["verdict"] for line in record.details["hops"]] == ["correct"]
    assert [sub.name for sub in record.substeps] == ["hop 2: retrieve", "hop 2: grade", "hop 2: refine"]


async def test_a_hops_failing_web_search_costs_that_hop_its_web_results_only() -> None:
    record = hop_record()
    first = [strip("Thomas Wolfe", "Thomas Wolfe was born in 1900.")]
    strips = await planner(ByTitle(), decomposer=RuleDecomposer()).follow(QUESTION, Verdict.AMBIGUOUS, first, record)
    assert strips == [first[0].model_copy(update={"hop": 1})]  # nothing found for Ada Lovelace, nothing lost
    assert record.details["hops"][0] | {"found": []} == {
        "question": "Who was born earlier, Ada Lovelace?", "verdict": "incorrect", "searched": True, "strips": 0,
        "found": [],
    }
    assert "web search for a hop failed (ConnectionError: search API unreachable)" == record.degraded
