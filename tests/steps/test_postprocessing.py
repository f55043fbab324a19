"""Postprocessing stages between retrieve and grade (`crag.steps.postprocessing`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from support.paths import SAMPLES

from crag import ChunkIndex, ConfigError, Settings, StepError, build_workflow
from crag.app.cli import main
from crag.config import PostprocessSettings
from crag.ingestion.configured import llm_options
from crag.models import LLMFactory, WordLlamaEmbedding
from crag.steps.grading import LexicalEvaluator
from crag.steps.postprocessing import (
    EmbeddingSimilarityCutoff,
    KeywordFilter,
    LlamaIndexPostprocessor,
    SentenceOptimizer,
    postprocessors_for,
    retrieval_depth,
    stage_name,
)
from crag.steps.retrieval import HybridRetriever
from crag.steps.synthesis import ExtractiveSynthesizer
from crag.text import TermStats
from crag.workflows.factory import postprocess_options
from crag.workflows.plain import PlainRAGWorkflow

WARRANTY = "What warranty does Lumen give on the Helio H10?"
QUESTION = "How long is the battery warranty?"


def chunk(text: str, score: float = 0.5, **metadata: str) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=text[:24], text=text, metadata=metadata), score=score)


def texts(chunks: Sequence[NodeWithScore]) -> list[str]:
    return [c.node.get_content() for c in chunks]


def stages(settings: Settings) -> list:
    """The stages the wiring builds from `settings`."""
    evaluator = LexicalEvaluator(TermStats())
    return postprocessors_for(
        postprocess_options(settings),
        top_n=settings.retriever.top_k,
        embed_model=WordLlamaEmbedding(),
        llms=LLMFactory(llm_options(settings)),
        evaluator=evaluator,
    )


def settings_with(base: Settings | None = None, **postprocess: object) -> Settings:
    """`base` (default: the defaults) with these postprocess settings."""
    return (base or Settings()).model_copy(update={"postprocess": PostprocessSettings(**postprocess)})


# Each stage on hand-made chunks.


async def test_reorder_puts_ranks_one_and_two_at_the_two_ends() -> None:
    ranked = [chunk(f"chunk ranked {rank}", score=1.0 - rank / 10) for rank in range(1, 6)]
    (reorder,) = stages(settings_with(stages=["reorder"]))
    out = await reorder.postprocess("q", ranked[::-1])
    assert texts(out)[0] == "chunk ranked 1" and texts(out)[-1] == "chunk ranked 2"
    assert sorted(texts(out)) == sorted(texts(ranked))


async def test_keyword_exclusion_removes_chunks_holding_the_word_in_any_case() -> None:
    chunks = [
        chunk("The Warranty lasts 12 years."), chunk("Warranties differ by country."), chunk("Install indoors.")
    ]
    (keywords,) = stages(settings_with(stages=["keywords"], exclude_keywords=["warranty"]))
    # Whole words: "Warranties" is another word and stays.
    assert texts(await keywords.postprocess("q", chunks)) == texts(chunks[1:])


async def test_required_keywords_keep_only_chunks_holding_one_of_them() -> None:
    chunks = [
        chunk("Only a certified INSTALLER may mount it."), chunk("It uses a Lithium-ion cell."), chunk("Nothing.")
    ]
    keywords = LlamaIndexPostprocessor(KeywordFilter(required_keywords=["installer", "lithium ion"]))
    # A keyword of several words matches them in sequence, whatever joins them.
    assert texts(await keywords.postprocess("q", chunks)) == texts(chunks[:2])


def test_a_keywords_stage_without_keywords_or_with_an_unmatchable_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--require / --exclude"):
        stages(settings_with(stages=["keywords"]))
    with pytest.raises(ConfigError, match="'!!!' has no letters"):
        stages(settings_with(stages=["keywords"], exclude_keywords=["!!!"]))


async def test_similarity_cutoff_drops_chunks_unlike_the_query_and_keeps_the_retrievers_scores() -> None:
    chunks = [
        chunk("Bananas are a yellow fruit grown on tropical plants.", score=0.033),
        chunk("The battery warranty lasts twelve years.", score=0.016),
        chunk("The office closes at five on Fridays.", score=0.015),
    ]
    cutoff = EmbeddingSimilarityCutoff(WordLlamaEmbedding(), cutoff=0.5)
    out = await cutoff.postprocess(QUESTION, chunks)
    assert texts(out) == ["The battery warranty lasts twelve years."]
    assert out[0].score == 0.016


async def test_sentence_window_stage_swaps_each_sentence_for_its_window_leaving_the_index_alone() -> None:
    window_text = "Lumen sells it. The warranty lasts 12 years. Claims go to Lumen."
    node = TextNode(text="The warranty lasts 12 years.", metadata={"window": window_text})
    (window,) = stages(settings_with(stages=["sentence_window"]))
    (out,) = await window.postprocess("q", [NodeWithScore(node=node, score=0.4)])
    assert out.node.get_content() == window_text
    assert out.score == 0.4 and out.node.node_id == node.node_id
    assert node.get_content() == "The warranty lasts 12 years."  # the index's own node is unchanged


async def test_optimizer_keeps_the_relevant_sentence_with_one_sentence_either_side() -> None:
    text = (
        "The company was founded in Oslo. It employs forty people. The battery warranty lasts twelve "
        "years from installation. Claims go through the installer. The office has a red door."
    )
    optimizer = SentenceOptimizer(WordLlamaEmbedding(), percentile=0.2, context_before=1, context_after=1)
    (out,) = await optimizer.postprocess(QUESTION, [chunk(text, title="Lumen")])
    assert out.node.get_content() == (
        "It employs forty people. The battery warranty lasts twelve years from installation. "
        "Claims go through the installer."
    )
    assert "title" in out.node.get_content(metadata_mode="llm")  # metadata stays metadata, not text


async def test_optimizer_threshold_drops_a_chunk_with_no_sentence_similar_enough() -> None:
    optimizer = SentenceOptimizer(WordLlamaEmbedding(), percentile=None, threshold=0.5)
    chunks = [chunk("Bananas are yellow. The office has a red door."), chunk("The warranty lasts twelve years.")]
    out = await optimizer.postprocess(QUESTION, chunks)
    assert texts(out) == ["The warranty lasts twelve years."]


def test_an_optimizer_with_neither_cutoff_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="optimizer_percentile or optimizer_threshold"):
        stages(settings_with(stages=["optimizer"], optimizer_percentile=None))


async def test_the_adapter_hands_any_llama_index_postprocessor_the_query() -> None:
    class KeepMentioned(BaseNodePostprocessor):
        def _postprocess_nodes(
            self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
        ) -> list[NodeWithScore]:
            return [n for n in nodes if query_bundle.query_str.split()[0] in n.node.get_content()]

    adapted = LlamaIndexPostprocessor(KeepMentioned())
    assert stage_name(adapted) == "KeepMentioned"
    out = await adapted.postprocess("battery", [chunk("a battery"), chunk("a door")])
    assert texts(out) == ["a battery"]


# Settings to stages.


def test_stages_are_built_in_the_order_the_settings_list_them() -> None:
    order = ["reorder", "optimizer", "keywords", "similarity_cutoff", "sentence_window"]
    built = stages(settings_with(stages=order, required_keywords=["warranty"]))
    assert [stage_name(s) for s in built] == order
    assert stages(settings_with()) == []


def test_environment_variable_lists_the_stages() -> None:
    settings = Settings.load(
        env={"CRAG_POSTPROCESS__STAGES": "reorder,keywords", "CRAG_POSTPROCESS__EXCLUDE_KEYWORDS": "door"}
    )
    assert settings.postprocess.stages == ["reorder", "keywords"]
    assert [stage_name(s) for s in stages(settings)] == ["reorder", "keywords"]


def test_an_unknown_stage_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="postprocess.stages"):
        Settings.load(env={"CRAG_POSTPROCESS__STAGES": "reorder,shuffle"})


def test_a_rerank_stage_makes_the_retriever_fetch_rerank_depth_chunks(sample_settings: Settings) -> None:
    top_k = sample_settings.retriever.top_k
    assert retrieval_depth(postprocess_options(sample_settings), top_k) == top_k
    reranked = settings_with(sample_settings, stages=["rerank"], rerank_depth=30)
    assert retrieval_depth(postprocess_options(reranked), top_k) == 30
    pytest.importorskip("crag.steps.reranking", reason="the rerank stage is written separately")
    workflow = build_workflow(reranked)
    assert workflow.retriever.top_k == 30 and len(workflow.postprocessors) == 1


# In the workflow.


class RecordingGrader:
    """The offline evaluator, remembering the chunk texts it was asked to grade."""

    def __init__(self, index: ChunkIndex) -> None:
        self.evaluator = LexicalEvaluator(index.term_stats)
        self.seen: list[str] = []

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list:
        self.seen = texts(chunks)
        return await self.evaluator.grade(query, chunks)


async def test_without_stages_the_postprocess_step_passes_the_retrieved_chunks_on(
    sample_settings: Settings, sample_index: ChunkIndex
) -> None:
    grader = RecordingGrader(sample_index)
    result = await build_workflow(sample_settings, grader=grader).run(query=WARRANTY)
    retriever = HybridRetriever(sample_index, top_k=sample_settings.retriever.top_k)
    assert grader.seen == texts(await retriever.retrieve(WARRANTY))
    by_name = {s.name: s for s in result.trace.steps}
    assert by_name["retrieve"].output_events[-1] == "CandidatesEvent"
    postprocess = by_name["postprocess"]
    assert (postprocess.input_event, postprocess.output_events) == ("CandidatesEvent", ["RetrievedEvent"])
    assert by_name["grade"].input_event == "RetrievedEvent"


async def test_stages_run_in_the_workflow_between_retrieve_and_grade(
    sample_settings: Settings, sample_index: ChunkIndex
) -> None:
    settings = settings_with(sample_settings, stages=["keywords", "reorder"], exclude_keywords=["garage"])
    grader = RecordingGrader(sample_index)
    result = await build_workflow(settings, grader=grader).run(query=WARRANTY)
    retrieved = await HybridRetriever(sample_index, top_k=settings.retriever.top_k).retrieve(WARRANTY)
    kept = [c.node.get_content() for c in retrieved if "garage" not in c.node.get_content()]
    assert len(kept) == len(retrieved) - 1 == 3  # one chunk (installation) mentions a garage
    assert grader.seen == [kept[0], kept[2], kept[1]]  # then reordered: ranks 1 and 2 at the ends
    assert len(result.grades) == len(kept)
    steps = result.steps
    assert steps.index("retrieve") < steps.index("postprocess") < steps.index("grade")


async def test_a_stage_that_raises_fails_the_step_naming_the_stage(sample_settings: Settings) -> None:
    class Broken:
        name = "broken"

        async def postprocess(self, query: str, chunks: Sequence[NodeWithScore]) -> list[NodeWithScore]:
            raise RuntimeError("no windows")

    workflow = build_workflow(sample_settings, postprocessors=[Broken()])
    with pytest.raises(StepError, match=r"step 'postprocess/broken' failed: RuntimeError: no windows"):
        await workflow.run(query=WARRANTY)


async def test_plain_rag_runs_the_stages_too(sample_index: ChunkIndex) -> None:
    (keywords,) = stages(settings_with(stages=["keywords"], required_keywords=["warranty"]))
    workflow = PlainRAGWorkflow(
        retriever=HybridRetriever(sample_index), synthesizer=ExtractiveSynthesizer(),
        postprocessors=[keywords],
    )
    result = await workflow.run(query=WARRANTY)
    assert result.steps == ["retrieve", "postprocess", "synthesize"]
    assert result.sources and all("warranty" in s.text.lower() for s in result.sources)


def test_a_sentence_window_stage_on_an_index_without_windows_is_a_config_error(
    sample_settings: Settings,
) -> None:
    with pytest.raises(ConfigError, match="--chunker sentence_window"):
        build_workflow(settings_with(sample_settings, stages=["sentence_window"]))


# From the command line.


def ask_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["ask", WARRANTY, "--quiet", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_ask_with_postprocess_flags_shows_the_step_and_its_effect(
    capsys: pytest.CaptureFixture[str], sample_index_dir: Path
) -> None:
    plain = ask_json(capsys, "--index", str(sample_index_dir))
    filtered = ask_json(
        capsys, "--index", str(sample_index_dir), "--postprocess", "keywords,reorder", "--exclude", "installer"
    )
    trace = {s["name"]: s for s in filtered["trace"]["steps"]}
    assert trace["postprocess"]["input_event"] == "CandidatesEvent"
    assert filtered["steps"].index("postprocess") < filtered["steps"].index("grade")
    assert len(filtered["grades"]) < len(plain["grades"])
    assert all("installer" not in s["text"].lower() for s in filtered["sources"])


def test_sentence_window_ingest_then_ask_answers_from_the_windows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    index = str(tmp_path / "windows")
    ingest = ["ingest", str(SAMPLES / "docs"), "--index", index, "--chunker", "sentence_window", "--quiet"]
    assert main(ingest) == 0
    nodes = ChunkIndex.load(index).nodes
    assert all("window" in n.metadata for n in nodes)
    assert not any("window" in n.get_content(metadata_mode="embed") for n in nodes)  # sentences embedded
    capsys.readouterr()
    sentences_only = ask_json(capsys, "--index", index)
    windows = ask_json(capsys, "--index", index, "--postprocess", "sentence_window")
    assert windows["verdict"] == "correct" and "12-year warranty" in windows["answer"]
    assert "postprocess" in windows["steps"]
    # The grader reads windows: a sentence beside the answer now scores with its neighbours.
    total = lambda out: sum(g["score"] for g in out["grades"])  # noqa: E731
    assert total(windows) > total(sentences_only)


def test_sentence_window_stage_on_a_plain_index_exits_2_with_the_remedy(
    capsys: pytest.CaptureFixture[str], sample_index_dir: Path
) -> None:
    ask = ["ask", WARRANTY, "--index", str(sample_index_dir), "--postprocess", "sentence_window"]
    assert main(ask) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error:") and "--chunker sentence_window" in err
