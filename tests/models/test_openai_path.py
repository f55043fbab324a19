"""crag's LLM components against a loopback server speaking OpenAI's chat-completions API.

Nothing of crag is mocked: `Settings.load` and `build_workflow` pick the components, and
the real openai client (through llama-index's OpenAILike) talks HTTP to 127.0.0.1.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llama_index.core.schema import NodeWithScore
from support.corpus import ingested
from support.loopback import (
    LoopbackServer,
    Reply,
    message_text,
    openai_chat,
    tavily_result,
    tavily_search,
)

import crag
from crag.steps.grading import LexicalEvaluator, parse_grade
from crag.steps.synthesis import NO_KNOWLEDGE

QUESTION = "How long does the Zephyr battery last?"
MODEL = "loopback-model-1"
DOCS = {
    "battery.md": "# Battery\nThe Zephyr drone battery lasts 42 minutes per charge. "
    "Store the battery at half charge when you are not flying.\n",
    "charger.md": "# Charger\nThe Zephyr charger fills an empty battery in about two hours. "
    "Use only the supplied charger.\n",
    "camera.md": "# Camera\nThe Zephyr camera records 4K video at 60 frames per second. "
    "Photos are saved to the microSD card.\n",
    "warranty.txt": "The warranty covers manufacturing defects for two years. "
    "Crash damage is not covered.\n",
}


# --- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    """A four-chunk index: one chunk per hand-written file."""
    index_dir = ingested(tmp_path_factory.mktemp("openai"), DOCS)
    assert len(crag.ChunkIndex.load(index_dir)) == len(DOCS)
    return index_dir


@pytest.fixture
def index(index_dir) -> crag.ChunkIndex:
    return crag.ChunkIndex.load(index_dir)


def llm_settings(server: LoopbackServer, index_dir: Path, env: dict | None = None, **sections):
    """Settings as a user pointing crag at an OpenAI-compatible server would write them."""
    return crag.Settings.load(
        env={
            "OPENAI_BASE_URL": server.url + "/v1",
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_MODEL": MODEL,
            **(env or {}),
        },
        index={"path": index_dir},
        **sections,
    )


async def ask(server: LoopbackServer, index_dir: Path, env: dict | None = None, **sections):
    """Build the workflow from settings (as an application would) and ask QUESTION."""
    settings = llm_settings(server, index_dir, env, **sections)
    workflow = crag.build_workflow(settings, index=crag.ChunkIndex.load(index_dir))
    return await workflow.run(query=QUESTION)


def is_grading(prompt: str) -> bool:
    return "Rate how relevant the document is" in prompt


def is_rewrite(prompt: str) -> bool:
    return prompt.startswith("Rewrite the question")


def is_synthesis(prompt: str) -> bool:
    return prompt.startswith("Answer the question using only the numbered passages")


def calls(server: LoopbackServer, kind) -> list:
    """The recorded chat requests whose prompt `kind` recognises, in arrival order."""
    return [r for r in server.requests_to("/chat/completions") if kind(message_text(r))]


def prompts(server: LoopbackServer, kind) -> list[str]:
    return [message_text(r) for r in calls(server, kind)]


def grading_reply(prompt: str) -> str:
    """'9' for documents about the battery, '1' for the rest."""
    document = prompt.split("Document:", 1)[1].split("Rate how relevant", 1)[0]
    return "9" if "battery" in document.lower() else "1"


# --- grading -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def correct_run(index_dir):
    """One run: battery chunks rated 9, the rest 1; every grading call takes 0.2 s."""
    handler = openai_chat(
        lambda p: grading_reply(p) if is_grading(p) else "It lasts 42 minutes [1].",
        delay=lambda p: 0.2 if is_grading(p) else 0.0,
    )
    index = crag.ChunkIndex.load(index_dir)
    with LoopbackServer(handler) as server:
        result = crag.build_workflow(llm_settings(server, index_dir), index=index).ask(QUESTION)
    return server, result, index


def test_grader_sends_one_request_per_retrieved_chunk_with_chunk_and_question(correct_run):
    server, result, index = correct_run
    grading = prompts(server, is_grading)
    assert len(grading) == len(result.grades) == len(index)
    texts = {n.node_id: n.get_content() for n in index.nodes}
    for grade in result.grades:
        matching = [p for p in grading if texts[grade.chunk_id] in p]
        assert len(matching) == 1, f"chunk {grade.chunk_id} should be graded by exactly one request"
        assert f"Question: {QUESTION}" in matching[0]
    assert all(g.grader == "llm" and g.note is None for g in result.grades)


def test_every_request_carries_the_api_key_and_configured_model(correct_run):
    server, _, _ = correct_run
    # 4 grades, 1 rewrite started alongside grading (speculative), 1 answer
    assert len(server.requests) == len(DOCS) + 2 and not server.errors
    for request in server.requests:
        assert (request.method, request.path) == ("POST", "/v1/chat/completions")
        assert request.headers["authorization"] == "Bearer sk-test"
        assert request.json["model"] == MODEL
        assert request.json["temperature"] == 0.0
    # Only the answer is streamed (it reaches the reader as it is written).
    streamed = [r for r in server.requests if r.json.get("stream")]
    assert len(streamed) == 1 and "Answer:" in streamed[0].json["messages"][-1]["content"]


def test_grading_calls_are_in_flight_at_the_same_time(correct_run):
    """Each grading call takes 0.2 s on the server; all four overlap instead of queueing."""
    server, _, index = correct_run
    grading = calls(server, is_grading)
    assert len(grading) == len(index)
    last_start, first_end = max(c.started for c in grading), min(c.finished for c in grading)
    assert last_start < first_end, "a grading call waited for another to finish"


def test_model_grades_become_scores_and_a_high_one_makes_the_verdict_correct(correct_run):
    _, result, index = correct_run
    title = {n.node_id: n.metadata["title"] for n in index.nodes}
    scores = {title[g.chunk_id]: g.score for g in result.grades}
    assert scores == {"Battery": 0.9, "Charger": 0.9, "Camera": 0.1, "warranty": 0.1}
    assert result.verdict is crag.Verdict.CORRECT
    assert result.rewritten_query is None and "web_search" not in result.steps
    assert result.answer == "It lasts 42 minutes [1]."


async def test_without_speculation_a_correct_run_asks_for_no_rewrite(index_dir):
    handler = openai_chat(lambda p: grading_reply(p) if is_grading(p) else "It lasts 42 minutes [1].")
    with LoopbackServer(handler) as server:
        result = await ask(server, index_dir, env={"CRAG_REWRITER__SPECULATIVE": "false"})
    assert result.verdict is crag.Verdict.CORRECT
    assert prompts(server, is_rewrite) == [] and "rewrite" not in result.steps


async def test_grader_concurrency_setting_bounds_calls_in_flight(index_dir):
    """With grader.concurrency = 1 the calls run one after another."""
    handler = openai_chat(
        lambda p: grading_reply(p) if is_grading(p) else "ok [1]",
        delay=lambda p: 0.05 if is_grading(p) else 0.0,
    )
    with LoopbackServer(handler) as server:
        await ask(server, index_dir, env={"CRAG_GRADER__CONCURRENCY": "1"})

    grading = sorted(calls(server, is_grading), key=lambda r: r.started)
    assert len(grading) == len(DOCS)
    assert all(a.finished <= b.started for a, b in zip(grading, grading[1:]))


async def test_middling_grades_make_the_verdict_ambiguous_and_use_both_branches(index_dir):
    """Every chunk 5/10: between lower (0.35) and upper (0.6), so rewrite and keep internal."""

    def reply(prompt: str) -> str:
        if is_grading(prompt):
            return "5"
        return "zephyr battery runtime" if is_rewrite(prompt) else "It lasts 42 minutes [1]."

    with LoopbackServer(openai_chat(reply)) as server:
        result = await ask(server, index_dir)

    assert result.verdict is crag.Verdict.AMBIGUOUS
    assert [g.score for g in result.grades] == [0.5] * len(DOCS)
    assert result.rewritten_query == "zephyr battery runtime"
    assert len(prompts(server, is_rewrite)) == 1 and len(prompts(server, is_synthesis)) == 1
    assert result.sources and all(s.kind == "internal" for s in result.sources)  # no web search


async def test_unparseable_grade_falls_back_to_the_lexical_evaluator(index_dir, index):
    """'banana' for the battery chunk: that chunk gets the offline score and a note; no crash."""

    def reply(prompt: str) -> str:
        if is_grading(prompt):
            return "banana" if "42 minutes" in prompt else "2"
        return "It lasts 42 minutes [1]."

    with LoopbackServer(openai_chat(reply)) as server:
        result = await ask(server, index_dir)

    battery = next(n for n in index.nodes if "42 minutes" in n.get_content())
    offline_grader = LexicalEvaluator(index.term_stats)
    (offline,) = await offline_grader.grade(QUESTION, [NodeWithScore(node=battery)])
    (fallback,) = [g for g in result.grades if g.chunk_id == battery.node_id]
    assert (fallback.grader, fallback.score) == ("lexical", offline.score)
    assert "banana" in fallback.note and "used lexical" in fallback.note
    others = [g for g in result.grades if g.chunk_id != battery.node_id]
    assert all((g.grader, g.score, g.note) == ("llm", 0.2, None) for g in others)
    assert result.answer  # the run completed


async def test_failed_grading_call_falls_back_and_names_the_error(index_dir):
    """An HTTP 500 on grading (retries off) degrades to the lexical score; later steps run."""

    def reply(prompt: str) -> str | Reply:
        if is_grading(prompt):
            return Reply(500, {"error": {"message": "overloaded", "type": "server_error"}})
        return "It lasts 42 minutes [1]."

    with LoopbackServer(openai_chat(reply)) as server:
        result = await ask(server, index_dir, env={"CRAG_LLM__MAX_RETRIES": "0"})

    assert len(prompts(server, is_grading)) == len(DOCS)  # one attempt each
    assert all(g.grader == "lexical" for g in result.grades)
    assert all(g.note and "InternalServerError" in g.note for g in result.grades)


# --- rewriting ---------------------------------------------------------------------------------


async def test_incorrect_verdict_asks_the_model_for_a_search_query_and_searches_with_it(index_dir):
    """All grades 0 -> rewrite request -> the model's query (quotes trimmed) goes to the web."""
    text = "The Zephyr battery lasts 42 minutes of flight."
    page = tavily_result("Zephyr specs", "https://zephyr.example/specs", text)

    def reply(prompt: str) -> str:
        if is_grading(prompt):
            return "0"
        if is_rewrite(prompt):
            return '  "zephyr drone battery flight time"\n'
        return "About 42 minutes of flight [1]."

    with LoopbackServer(openai_chat(reply)) as llm, LoopbackServer(tavily_search([page])) as web:
        env = {"TAVILY_API_KEY": "tvly-test", "CRAG_WEB_SEARCH__BASE_URL": web.url}
        result = await ask(llm, index_dir, env=env)

    assert result.verdict is crag.Verdict.INCORRECT
    (rewrite_prompt,) = prompts(llm, is_rewrite)
    assert f"Question: {QUESTION}" in rewrite_prompt
    assert result.rewritten_query == "zephyr drone battery flight time"
    assert [r.json["query"] for r in web.requests] == ["zephyr drone battery flight time"]
    (synthesis_prompt,) = prompts(llm, is_synthesis)
    assert "[1] " in synthesis_prompt and "42 minutes of flight" in synthesis_prompt
    assert result.answer == "About 42 minutes of flight [1]."
    assert [(s.kind, s.url) for s in result.sources] == [("web", "https://zephyr.example/specs")]


async def test_incorrect_verdict_without_web_search_answers_that_nothing_was_found(index_dir):
    handler = openai_chat(lambda p: "0" if is_grading(p) else "zephyr battery life")
    with LoopbackServer(handler) as server:
        result = await ask(server, index_dir)

    assert result.verdict is crag.Verdict.INCORRECT
    assert result.rewritten_query == "zephyr battery life"
    assert result.answer == NO_KNOWLEDGE and result.sources == []
    assert prompts(server, is_synthesis) == []  # no passages: the model is not asked


# --- synthesis ---------------------------------------------------------------------------------


async def test_synthesizer_sends_numbered_passages_and_keeps_only_cited_sources(index_dir):
    """Two kept chunks become passages [1] and [2]; the answer cites one, so one source stays."""

    def reply(prompt: str) -> str:
        if is_grading(prompt):
            return grading_reply(prompt)
        cited = re.search(r"\[(\d+)\][^\[]*42 minutes", prompt).group(1)
        return f"The Zephyr battery lasts 42 minutes per charge [{cited}]."

    with LoopbackServer(openai_chat(reply)) as server:
        # min_score 0 keeps every strip of the kept chunks, so both battery chunks are passages.
        result = await ask(server, index_dir, refiner={"min_score": 0.0})

    (prompt,) = prompts(server, is_synthesis)
    assert re.findall(r"^\[(\d+)\] ", prompt, flags=re.M) == ["1", "2"]
    assert "42 minutes" in prompt and "two hours" in prompt
    assert prompt.rstrip().endswith(f"Question: {QUESTION}\nAnswer:")
    cited = int(re.search(r"\[(\d+)\]", result.answer).group(1))
    assert result.answer == f"The Zephyr battery lasts 42 minutes per charge [{cited}]."
    assert [s.number for s in result.sources] == [cited]
    assert "42 minutes" in result.sources[0].text and result.sources[0].kind == "internal"


async def test_answer_without_citations_keeps_every_passage_as_a_source(index_dir):
    def reply(prompt: str) -> str:
        return grading_reply(prompt) if is_grading(prompt) else "Roughly three quarters of an hour."

    with LoopbackServer(openai_chat(reply)) as server:
        result = await ask(server, index_dir, refiner={"min_score": 0.0})

    assert result.answer == "Roughly three quarters of an hour."
    assert [s.number for s in result.sources] == [1, 2]


# --- parse_grade -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("7", 0.7),
        ("10", 1.0),
        ("0", 0.0),
        ("Score: 8/10", 0.8),
        ("7/10.", 0.7),
        ("3 out of 10", 0.3),
        ("**8**", 0.8),
        ('{"score": 6}', 0.6),
        ("Rating: 9\n", 0.9),
        ("3.5/10", 0.35),
        # A decimal between 0 and 1 is the probability the model meant, not 0.05 of 10.
        ("0.5", 0.5),
        ("8.", 0.8),
        ("Score: 8.", 0.8),
        ("yes", 1.0),
        ("YES", 1.0),
        ("Yes.", 1.0),
        ("No.", 0.0),
        ("no", 0.0),
        ("Relevant", 1.0),
        ("Irrelevant", 0.0),
    ],
)
def test_parse_grade_reads_ratings_on_a_0_to_10_scale_and_yes_no(reply, score):
    assert parse_grade(reply) == pytest.approx(score)


@pytest.mark.parametrize("reply", ["banana", "", "   ", "v2", "not sure", "11", "42/10", "2024"])
def test_parse_grade_rejects_garbage_and_out_of_range_numbers(reply):
    with pytest.raises(crag.GradeParseError):
        parse_grade(reply)


@pytest.mark.parametrize("reply", [
    "The document is irrelevant to 10.",  # a real model's reply once read as 1.0 (issue 31)
    "The battery stores 10 kilowatt-hours.",  # an echo of the document
    "I rate it 3 out of 10",  # prose around the number
    "7 or 8",  # several numbers
    "8\nThe document names the warranty period, 12 years.",
    "Question: How long is the warranty?\n\nDocument:",
])
def test_a_grade_is_only_a_reply_that_is_the_number_asked_for(reply):
    with pytest.raises(crag.GradeParseError):
        parse_grade(reply)


def test_grade_parse_error_is_a_crag_error_that_quotes_the_reply():
    with pytest.raises(crag.CragError, match="banana"):
        parse_grade("banana")
    with pytest.raises(crag.GradeParseError, match="outside 0-10"):
        parse_grade("11")


def test_parse_grade_rejects_negative_numbers():
    with pytest.raises(crag.GradeParseError):
        parse_grade("-3")


def test_the_trace_counts_every_model_call_and_its_tokens(correct_run):
    server, result, _ = correct_run
    calls = {s.name: s.llm_calls for s in result.trace.steps}
    assert calls == {
        "retrieve": 0, "postprocess": 0, "rewrite": 1, "grade": len(DOCS), "refine_internal": 0, "hop": 0, "synthesize": 1
    }
    assert result.trace.llm_calls == len(server.requests)
    # The server counts one token per word of the prompt and of the reply (support/loopback.py).
    expected = 0
    for request in server.requests:
        prompt = message_text(request)
        reply = grading_reply(prompt) if is_grading(prompt) else "It lasts 42 minutes [1]."
        expected += max(1, len(prompt.split())) + max(1, len(reply.split()))
    assert result.trace.tokens == expected
