"""Two-stage retrieval: the rerankers keep the best `top_n` of a wide first stage."""

from __future__ import annotations

import asyncio
import inspect
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llama_index.core.schema import NodeWithScore, TextNode
from support.loopback import LoopbackServer, openai_chat

from crag import Settings, build_workflow
from crag.errors import ConfigError
from crag.ingestion.configured import llm_options
from crag.models import LLMFactory, WordLlamaEmbedding
from crag.steps.grading import LexicalEvaluator
from crag.steps.reranking import (
    Choice,
    LexicalReranker,
    LLMReranker,
    parse_rerank_reply,
    reranker_for,
)
from crag.testing import FakeLLM
from crag.text import TermStats
from crag.trace import StepRecord, attributing_calls_to
from crag.workflows import CorrectiveRAGWorkflow
from crag.workflows.factory import postprocess_options

QUESTION = "How long does the Zephyr battery last?"
TEXTS = [
    "The Zephyr charger fills an empty battery in about two hours.",
    "The Zephyr camera records 4K video at 60 frames per second.",
    "The warranty covers manufacturing defects for two years.",
    "Store the Zephyr at room temperature when you are not flying.",
    "The Zephyr drone battery lasts 42 minutes per charge.",
]
ANSWER = TEXTS[4]


def chunks_of(texts: list[str]) -> list[NodeWithScore]:
    """Chunks in first-stage order, scored as a retriever would (descending)."""
    return [
        NodeWithScore(node=TextNode(id_=f"c{i}", text=t), score=1.0 / (i + 1)) for i, t in enumerate(texts)
    ]


@pytest.fixture(scope="module")
def embed() -> WordLlamaEmbedding:
    return WordLlamaEmbedding()


@pytest.fixture
def offline(embed: WordLlamaEmbedding) -> LexicalReranker:
    return LexicalReranker(LexicalEvaluator(TermStats.from_texts(TEXTS)), embed, top_n=3)


def wired_reranker(
    settings: Settings, evaluator: LexicalEvaluator, embed: WordLlamaEmbedding, top_n: int
) -> object:
    """The reranker the wiring builds from `settings`."""
    post = postprocess_options(settings)
    return reranker_for(
        post.rerank,
        LLMFactory(llm_options(settings)),
        evaluator,
        embed,
        top_n,
        batch_size=post.rerank_batch_size,
        concurrency=post.rerank_concurrency,
    )


def documents_in(prompt: str) -> list[str]:
    """The documents of a choice-select prompt, in the order numbered (1, 2, ...)."""
    listed = prompt.split("Let's try this now:", 1)[1].rsplit("Question:", 1)[0]
    return [d.strip() for d in re.split(r"Document \d+:", listed)[1:]]


def relevance_by_keyword(prompt: str) -> str:
    """'Doc: n, Relevance: 9' for the document about battery life, 3 for other battery ones,
    and "None" when the prompt shows neither."""
    lines = []
    for number, doc in enumerate(documents_in(prompt), start=1):
        if "lasts" in doc:
            lines.append(f"Doc: {number}, Relevance: 9")
        elif "battery" in doc:
            lines.append(f"Doc: {number}, Relevance: 3")
    return "\n".join(lines) or "None of these documents is relevant."


# --- the offline reranker ---------------------------------------------------------------------


async def test_offline_reranker_promotes_the_chunk_that_answers_from_last_place(offline: LexicalReranker) -> None:
    kept = await offline.postprocess(QUESTION, chunks_of(TEXTS))
    assert kept[0].node.get_content() == ANSWER


async def test_rerank_keeps_top_n_in_descending_score_order_with_scores_in_0_1(offline: LexicalReranker) -> None:
    kept = await offline.postprocess(QUESTION, chunks_of(TEXTS))
    scores = [k.score for k in kept]
    assert len(kept) == 3
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores)
    # The kept scores are the best three of all five.
    every = await offline.scores(QUESTION, chunks_of(TEXTS))
    assert scores == sorted(every, reverse=True)[:3]


async def test_ties_keep_first_stage_order(embed: WordLlamaEmbedding) -> None:
    lexical_only = LexicalReranker(
        LexicalEvaluator(TermStats.from_texts(TEXTS)), embed, top_n=3, cosine_weight=0.0, rank_weight=0.0
    )
    kept = await lexical_only.postprocess("nothing here matches", chunks_of(TEXTS[:4]))
    assert len({k.score for k in kept}) == 1  # every chunk the same (low) grade: a tie
    assert [k.node.node_id for k in kept] == ["c0", "c1", "c2"]


async def test_fewer_chunks_than_top_n_keeps_them_all_and_none_gives_none(offline: LexicalReranker) -> None:
    assert len(await offline.postprocess(QUESTION, chunks_of(TEXTS[:2]))) == 2
    assert await offline.postprocess(QUESTION, []) == []


def test_top_n_below_one_is_a_config_error(embed: WordLlamaEmbedding) -> None:
    with pytest.raises(ConfigError, match="top_n is 0"):
        LexicalReranker(LexicalEvaluator(TermStats()), embed, top_n=0)


# --- the reply parser -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "choices"),
    [
        ("Doc: 4, Relevance: 7\nDoc: 2, Relevance: 4", [Choice(4, 7.0), Choice(2, 4.0)]),
        ("Doc 2, Relevance: 8", [Choice(2, 8.0)]),
        ("Document: 3 - relevance 7/10", [Choice(3, 7.0)]),
        ("Sure! Here you are.\n\nDoc: 1, Relevance: 6\nHope this helps.", [Choice(1, 6.0)]),
        ("Doc: 1, Relevance: 8; Doc: 5, Relevance: 2", [Choice(1, 8.0), Choice(5, 2.0)]),
        ("Document 2 (relevance 90 out of 100)", [Choice(2, 9.0)]),
        ("3, 7\n1: 5", [Choice(3, 7.0), Choice(1, 5.0)]),
    ],
)
def test_parser_reads_the_shapes_models_write(reply: str, choices: list[Choice]) -> None:
    assert parse_rerank_reply(reply, 5) == choices


def test_parser_ignores_out_of_range_numbers_and_repeats() -> None:
    reply = "Doc: 0, Relevance: 9\nDoc: 6, Relevance: 9\nDoc: 2, Relevance: 5\nDoc: 2, Relevance: 10"
    assert parse_rerank_reply(reply, 5) == [Choice(2, 5.0)]


def test_missing_relevance_takes_the_one_named_before_it_or_the_top() -> None:
    assert parse_rerank_reply("Doc: 3\nDoc: 1, Relevance: 6\nDoc: 4", 5) == [
        Choice(3, 10.0), Choice(1, 6.0), Choice(4, 6.0)
    ]


def test_a_document_called_not_relevant_scores_zero() -> None:
    reply = "Document 1 is not relevant. Document 2 answers it, relevance 9."
    assert parse_rerank_reply(reply, 2) == [Choice(1, 0.0), Choice(2, 9.0)]


def test_none_relevant_is_an_answer_and_no_document_at_all_is_unusable() -> None:
    assert parse_rerank_reply("None of the documents are relevant.", 5) == []
    assert parse_rerank_reply("", 5) is None
    assert parse_rerank_reply("I cannot help with that.", 5) is None
    assert parse_rerank_reply("Doc: 9, Relevance: 9", 5) is None  # names only documents it was not shown


@given(st.text(), st.integers(min_value=0, max_value=50))
def test_parser_never_raises_and_names_only_shown_documents_once(reply: str, count: int) -> None:
    choices = parse_rerank_reply(reply, count)
    if choices is not None:
        numbers = [c.number for c in choices]
        assert len(set(numbers)) == len(numbers)
        assert all(1 <= n <= count for n in numbers)
        assert all(0.0 <= c.relevance <= 10.0 for c in choices)


@given(st.lists(st.tuples(st.integers(-3, 30), st.one_of(st.none(), st.floats(-5, 200))), max_size=12))
def test_parser_never_raises_on_list_shaped_replies(lines: list[tuple[int, float | None]]) -> None:
    reply = "\n".join(f"Doc: {n}" + ("" if r is None else f", Relevance: {r}") for n, r in lines)
    choices = parse_rerank_reply(reply, 10)
    assert choices is None or all(0.0 <= c.relevance <= 10.0 for c in choices)


# --- the LLM reranker, with FakeLLM ------------------------------------------------------------


async def test_llm_rerank_orders_by_the_model_relevance_normalised(offline: LexicalReranker) -> None:
    llm = FakeLLM(reply=relevance_by_keyword)
    kept = await LLMReranker(llm, offline, top_n=3, batch_size=2).postprocess(QUESTION, chunks_of(TEXTS))
    assert [k.node.get_content() for k in kept] == [ANSWER, TEXTS[0], TEXTS[1]]
    # Left out by the model: relevance 0, after the named ones, by first-stage rank.
    assert [k.score for k in kept] == [0.9, 0.3, 0.0]
    assert len(llm.calls) == 3  # batches of 2, 2 and 1
    assert QUESTION in llm.calls[0] and TEXTS[0] in llm.calls[0] and TEXTS[1] in llm.calls[0]


async def test_llm_rerank_batches_run_concurrently_within_the_bound(offline: LexicalReranker) -> None:
    texts = [f"Filler passage number {i} about nothing." for i in range(25)]
    llm = FakeLLM(reply=lambda prompt: "Doc: 1, Relevance: 5", latency=0.05)
    await LLMReranker(llm, offline, top_n=5, batch_size=10).postprocess(QUESTION, chunks_of(texts))
    assert len(llm.calls) == 3 and llm.peak_in_flight == 3
    bounded = FakeLLM(reply=lambda prompt: "Doc: 1, Relevance: 5", latency=0.05)
    await LLMReranker(bounded, offline, top_n=5, batch_size=10, concurrency=1).postprocess(QUESTION, chunks_of(texts))
    assert len(bounded.calls) == 3 and bounded.peak_in_flight == 1


async def test_an_unusable_batch_is_scored_offline_and_recorded(offline: LexicalReranker) -> None:
    def reply(prompt: str) -> str:
        # The batch holding the answer gets prose; the other a well-formed reply.
        return "I am not sure." if ANSWER in prompt else "Doc: 1, Relevance: 2"

    record = StepRecord(name="postprocess", input_event="RetrievedEvent", started=0.0)
    with attributing_calls_to(record):
        kept = await LLMReranker(FakeLLM(reply=reply), offline, top_n=2, batch_size=3).postprocess(
            QUESTION, chunks_of(TEXTS)
        )
    offline_scores = await offline.scores(QUESTION, chunks_of(TEXTS))
    assert kept[0].node.get_content() == ANSWER and kept[0].score == offline_scores[4]
    assert record.degraded and "1 of 2 rerank batches unusable" in record.degraded
    assert "I am not sure." in record.degraded and "lexical_rerank" in record.degraded


async def test_a_failed_call_is_scored_offline_and_a_partial_reply_keeps_what_it_names(
    offline: LexicalReranker,
) -> None:
    def reply(prompt: str) -> str:
        if ANSWER in prompt:
            raise ConnectionError("model server down")
        return "Doc: 2, Relevance: 7\nDoc: 3, Rel"  # cut off mid-line

    record = StepRecord(name="postprocess", input_event="RetrievedEvent", started=0.0)
    with attributing_calls_to(record):
        kept = await LLMReranker(FakeLLM(reply=reply), offline, top_n=5, batch_size=3).postprocess(
            QUESTION, chunks_of(TEXTS)
        )
    by_text = {k.node.get_content(): k.score for k in kept}
    assert by_text[TEXTS[1]] == 0.7 and by_text[TEXTS[2]] == 0.7  # doc 3 takes doc 2's relevance
    assert by_text[TEXTS[0]] == 0.0
    assert "ConnectionError: model server down" in (record.degraded or "")


async def test_a_well_formed_run_records_nothing_degraded(offline: LexicalReranker) -> None:
    record = StepRecord(name="postprocess", input_event="RetrievedEvent", started=0.0)
    with attributing_calls_to(record):
        await LLMReranker(FakeLLM(reply=relevance_by_keyword), offline, top_n=3).postprocess(QUESTION, chunks_of(TEXTS))
    assert record.degraded is None


# --- choosing a reranker from settings ----------------------------------------------------------


@pytest.mark.parametrize(
    ("rerank", "env", "kind"),
    [
        ("auto", {}, LexicalReranker),
        ("lexical", {"OPENAI_API_KEY": "sk-test-rerank"}, LexicalReranker),
        ("auto", {"OPENAI_API_KEY": "sk-test-rerank"}, LLMReranker),
        ("llm", {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}, LLMReranker),
    ],
)
def test_reranker_for_picks_by_settings(embed, rerank: str, env: dict, kind: type) -> None:
    settings = Settings.load(env=env, postprocess={"rerank": rerank, "rerank_batch_size": 4})
    reranker = wired_reranker(settings, LexicalEvaluator(TermStats()), embed, top_n=5)
    assert isinstance(reranker, kind) and reranker.top_n == 5
    if isinstance(reranker, LLMReranker):
        assert reranker.batch_size == 4 and reranker.concurrency == settings.grader.concurrency


def test_llm_rerank_without_a_model_is_a_config_error(embed) -> None:
    settings = Settings.load(env={}, postprocess={"rerank": "llm"})
    with pytest.raises(ConfigError, match="no model is configured"):
        wired_reranker(settings, LexicalEvaluator(TermStats()), embed, top_n=5)


# --- the real OpenAI client against a loopback server ------------------------------------------


async def test_llm_rerank_through_the_openai_client_sends_concurrent_choice_prompts(embed) -> None:
    with LoopbackServer(openai_chat(relevance_by_keyword, delay=lambda prompt: 0.2)) as server:
        settings = Settings.load(
            env={"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-test", "OPENAI_MODEL": "rerank-m"},
            postprocess={"rerank": "llm", "rerank_batch_size": 2},
        )
        evaluator = LexicalEvaluator(TermStats.from_texts(TEXTS))
        reranker = wired_reranker(settings, evaluator, embed, top_n=2)
        kept = await reranker.postprocess(QUESTION, chunks_of(TEXTS))
    assert [k.node.get_content() for k in kept] == [ANSWER, TEXTS[0]]
    assert [k.score for k in kept] == [0.9, 0.3]
    requests = server.requests_to("/chat/completions")
    assert len(requests) == 3 and {r.json["model"] for r in requests} == {"rerank-m"}
    overlapping = max(sum(r.started < s.finished and s.started < r.finished for r in requests) for s in requests)
    assert overlapping == 3


# --- end to end: retrieve wide, rerank, grade ---------------------------------------------------


@pytest.mark.skipif(
    "postprocessors" not in inspect.signature(CorrectiveRAGWorkflow.__init__).parameters,
    reason="CorrectiveRAGWorkflow has no postprocessors argument yet",
)
async def test_workflow_with_the_reranker_grades_only_the_reranked_chunks(sample_settings: Settings, sample_index) -> None:
    wide = sample_settings.model_copy(update={"retriever": sample_settings.retriever.model_copy(update={"top_k": 20})})
    base = build_workflow(wide, index=sample_index)
    reranker = LexicalReranker(LexicalEvaluator(sample_index.term_stats), WordLlamaEmbedding(), top_n=2)
    question = "What warranty does Lumen give on the Helio H10?"
    workflow = CorrectiveRAGWorkflow(
        retriever=base.retriever,
        grader=base.grader,
        refiner=base.refiner,
        rewriter=base.rewriter,
        web_search=base.searcher,
        synthesizer=base.synthesizer,
        postprocessors=[reranker],
    )
    result = await workflow.run(query=question)
    expected = await reranker.postprocess(question, await base.retriever.retrieve(question))
    assert [g.chunk_id for g in result.grades] == [c.node.node_id for c in expected]
    assert "12-year warranty" in result.answer


async def test_rerank_stage_from_settings_retrieves_wide_and_grades_top_k(sample_settings: Settings, sample_index) -> None:
    settings = Settings.load(
        env={},
        index={"path": sample_settings.index.path},
        retriever={"top_k": 2},
        postprocess={"stages": ["rerank"], "rerank": "lexical", "rerank_depth": 3},
    )
    workflow = build_workflow(settings, index=sample_index)
    question = "What warranty does Lumen give on the Helio H10?"
    assert len(sample_index) > 3 and len(await workflow.retriever.retrieve(question)) == 3
    result = await workflow.run(query=question)
    assert len(result.grades) == 2 and "postprocess" in result.steps
    assert "12-year warranty" in result.answer


async def test_an_unusable_llm_rerank_in_a_run_is_reported_as_degraded(sample_settings: Settings, sample_index) -> None:
    reranker = LLMReranker(
        FakeLLM(reply=lambda prompt: "Let me think about it."),
        LexicalReranker(LexicalEvaluator(sample_index.term_stats), WordLlamaEmbedding(), top_n=3),
        top_n=3,
        batch_size=4,
    )
    workflow = build_workflow(sample_settings, index=sample_index, postprocessors=[reranker])
    result = await workflow.run(query="What warranty does Lumen give on the Helio H10?")
    assert len(result.grades) == 3
    assert any(line.startswith("postprocess: ") and "rerank batches unusable" in line for line in result.degraded)
    assert "12-year warranty" in result.answer


def test_one_llm_reranker_serves_several_event_loops() -> None:
    # As `workflow.ask` runs each call on a fresh loop: nothing loop-bound is kept between calls.
    reranker = LLMReranker(FakeLLM(reply=relevance_by_keyword), LexicalReranker(
        LexicalEvaluator(TermStats.from_texts(TEXTS)), WordLlamaEmbedding(), 1), top_n=1)
    for _ in range(2):
        kept = asyncio.run(reranker.postprocess(QUESTION, chunks_of(TEXTS)))
        assert kept[0].node.get_content() == ANSWER
