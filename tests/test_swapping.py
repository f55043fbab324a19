"""Every step is swappable: a user-written class changes behaviour as expected."""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.schema import NodeWithScore, TextNode

from crag import CorrectiveRAGWorkflow, Grade, Settings, Source, Strip, Verdict, build_workflow
from crag.interfaces import Grader, Retriever, Synthesizer, WebSearch


class KeywordGrader:
    """Relevant exactly when the chunk mentions the keyword."""

    def __init__(self, keyword: str) -> None:
        self.keyword = keyword

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        return [
            Grade(chunk_id=c.node.node_id, score=float(self.keyword in c.node.get_content()), grader="keyword")
            for c in chunks
        ]


class EncyclopediaSearch:
    """A web search that always returns one fixed page."""

    async def search(self, query: str) -> list[NodeWithScore]:
        page = TextNode(
            id_="web:encyclopedia",
            text="The Helio H10 is named after Helios, the sun god of Greek mythology.",
            metadata={"url": "https://encyclopedia.example/helio", "kind": "web"},
        )
        return [NodeWithScore(node=page, score=1.0)]


class ShoutingSynthesizer:
    async def synthesize(self, query: str, strips: Sequence[Strip]) -> tuple[str, list[Source]]:
        return " ".join(s.text.upper() for s in strips), []


def test_user_classes_satisfy_the_protocols() -> None:
    assert isinstance(KeywordGrader("x"), Grader)
    assert isinstance(EncyclopediaSearch(), WebSearch)
    assert isinstance(ShoutingSynthesizer(), Synthesizer)
    assert not isinstance(object(), Retriever)


async def test_a_custom_grader_decides_the_path(sample_settings: Settings) -> None:
    question = "What warranty does Lumen give on the Helio H10?"
    default = await build_workflow(sample_settings).run(query=question)
    swapped = await build_workflow(sample_settings, grader=KeywordGrader("sun god")).run(query=question)
    assert default.verdict is Verdict.CORRECT
    assert swapped.verdict is Verdict.INCORRECT
    assert {g.grader for g in swapped.grades} == {"keyword"}


async def test_a_custom_web_search_supplies_the_web_knowledge(sample_settings: Settings) -> None:
    workflow = build_workflow(sample_settings, web_search=EncyclopediaSearch())
    result = await workflow.run(query="Which god is the Helio named after?")
    # The handbook names the Helio but not its god: no grade reaches upper, so the web is asked.
    assert result.verdict in (Verdict.INCORRECT, Verdict.AMBIGUOUS)
    assert "https://encyclopedia.example/helio" in [s.url for s in result.sources]
    assert "sun god" in result.answer


async def test_a_custom_synthesizer_writes_the_answer(sample_settings: Settings) -> None:
    workflow = build_workflow(sample_settings, synthesizer=ShoutingSynthesizer())
    result = await workflow.run(query="What warranty does Lumen give on the Helio H10?")
    assert "12-YEAR WARRANTY" in result.answer


async def test_a_workflow_can_be_assembled_from_components_alone(sample_index) -> None:
    """No settings, no index on disk: every component passed in by hand."""
    from crag.steps.grading import LexicalEvaluator
    from crag.steps.refining import StripRefiner
    from crag.steps.retrieval import HybridRetriever
    from crag.steps.rewriting import KeywordRewriter
    from crag.steps.synthesis import ExtractiveSynthesizer

    evaluator = LexicalEvaluator(sample_index.term_stats)
    workflow = CorrectiveRAGWorkflow(
        retriever=HybridRetriever(sample_index),
        grader=evaluator,
        refiner=StripRefiner(evaluator),
        rewriter=KeywordRewriter(),
        web_search=EncyclopediaSearch(),
        synthesizer=ExtractiveSynthesizer(max_sentences=1),
    )
    result = await workflow.run(query="How much does a single Helio H10 weigh?")
    assert "98 kilograms" in result.answer
