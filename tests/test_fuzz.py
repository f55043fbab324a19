"""Property tests: whatever a model replies and whatever bytes a file holds, crag's parsers
return a value or raise the documented `CragError`, never anything else.

Kept fast (tens of examples each); `HYPOTHESIS_PROFILE=thorough` runs many more.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import string
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.schema import NodeWithScore, TextNode

import crag
from crag.errors import (
    REDACTED,
    GradeParseError,
    IndexNotFoundError,
    IngestError,
    QueryRejected,
    redact,
    register_secret,
)
from crag.events import Strip
from crag.index import ChunkIndex
from crag.ingestion.readers import read_documents
from crag.steps.grading import LexicalEvaluator, LLMGrader, parse_grade
from crag.steps.rewriting import LLMRewriter
from crag.steps.synthesis import NO_KNOWLEDGE, LLMSynthesizer
from crag.testing import FakeLLM
from crag.text import TermStats

settings.register_profile("fast", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))

# Model replies: any text, and text built from what replies are made of, so the
# interesting cases (numbers, brackets, yes/no, several lines) come up often.
reply_parts = st.sampled_from(
    ["7", "10", "0.8", "-3", "11", "3/10", "8/10.", "4.", "[1]", "[2]", "[0]", "[99999999999999999999]",
     "yes", "No", "relevant", "irrelevant", "Score:", "\n", "\n\n", " ", '"', "'", "`", "\x00", "١", "🙂", ".5"]
)
replies = st.one_of(st.text(max_size=200), st.lists(st.one_of(reply_parts, st.text(max_size=8)), max_size=12).map("".join))


def run(coroutine):  # noqa: ANN001, ANN201
    return asyncio.run(coroutine)


@given(replies)
def test_parse_grade_returns_a_score_between_0_and_1_or_raises_grade_parse_error(reply: str) -> None:
    try:
        score = parse_grade(reply)
    except GradeParseError as exc:
        assert str(exc)
    else:
        assert 0.0 <= score <= 1.0


CHUNKS = [
    NodeWithScore(node=TextNode(id_=f"c{i}", text=text, metadata={"title": title}), score=1.0)
    for i, (title, text) in enumerate(
        [("Battery", "The Zephyr battery lasts 42 minutes."), ("Camera", "The camera records 4K video.")]
    )
]
EVALUATOR = LexicalEvaluator(TermStats.from_texts(c.node.get_content() for c in CHUNKS))


@given(replies)
def test_the_llm_grader_turns_any_reply_into_a_grade_per_chunk(reply: str) -> None:
    grader = LLMGrader(FakeLLM(reply=lambda prompt: reply), fallback=EVALUATOR)
    grades = run(grader.grade("How long does the battery last?", CHUNKS))
    assert [g.chunk_id for g in grades] == ["c0", "c1"]
    assert all(0.0 <= g.score <= 1.0 for g in grades)
    assert all((g.grader == "llm") == (g.note is None) for g in grades)


# Questions as the workflow hands them on: whitespace runs collapsed to one space.
questions = st.text(min_size=1, max_size=80).map(lambda q: " ".join(q.split())).filter(bool)


@given(replies, questions)
def test_the_llm_rewriter_turns_any_reply_into_one_line_or_rejects_it(reply: str, question: str) -> None:
    try:
        rewritten = run(LLMRewriter(FakeLLM(reply=lambda prompt: reply)).rewrite(question))
    except QueryRejected as exc:  # the workflow's keyword rewriter then stands in
        assert str(exc).startswith("the model's rewrite")
        return
    assert isinstance(rewritten, str) and rewritten
    assert "\n" not in rewritten and "\r" not in rewritten


strips = st.lists(
    st.builds(
        Strip,
        text=st.text(min_size=1, max_size=60),
        score=st.floats(0, 1),
        source_id=st.sampled_from(["a", "b", "c", "web:x"]),
        kind=st.sampled_from(["internal", "web"]),
        doc_id=st.just("d"),
        title=st.one_of(st.none(), st.text(max_size=20)),
        url=st.one_of(st.none(), st.just("https://example.org")),
    ),
    max_size=5,
)


@given(replies, strips)
def test_the_llm_synthesizer_keeps_only_sources_it_was_given(reply: str, given_strips: list[Strip]) -> None:
    answer, sources = run(LLMSynthesizer(FakeLLM(reply=lambda prompt: reply)).synthesize("Why?", given_strips))
    distinct = list(dict.fromkeys(s.source_id for s in given_strips))
    if not given_strips:
        assert (answer, sources) == (NO_KNOWLEDGE, [])
        return
    assert answer == reply.strip()
    assert sources, "an answer from passages names at least one source"
    assert [s.id for s in sources] == [i for i in distinct if i in {s.id for s in sources}]
    assert {s.number for s in sources} <= set(range(1, len(distinct) + 1))


SUFFIXES = [".txt", ".md", ".html", ".htm", ".jsonl"]
file_bytes = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(lambda t: t.encode("utf-8")),
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"doc_id": st.text(max_size=5), "text": st.text(max_size=30)}),
            st.dictionaries(st.sampled_from(["doc_id", "text", "title", "url"]), st.one_of(st.none(), st.integers(), st.text(max_size=5))),
            st.lists(st.integers(), max_size=2),
            st.text(max_size=10),
        ).map(json.dumps),
        max_size=4,
    ).map(lambda lines: "\n".join(lines).encode("utf-8")),
    st.sampled_from([b"<html><title>x</title><script>", b"<p>unclosed <b>tags", b"</div></p>", b"<!-- ", b"\xef\xbb\xbf# T\n"]),
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(file_bytes, st.sampled_from(SUFFIXES))
def test_reading_any_bytes_gives_documents_with_text_or_an_ingest_error(data: bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"file{suffix}"
        path.write_bytes(data)
        try:
            documents = list(read_documents(path))
        except IngestError as exc:
            assert str(path) in str(exc)
            return
    for document in documents:
        assert isinstance(document.text, str) and document.doc_id
        assert isinstance(document.metadata["title"], str)


@pytest.fixture(scope="module")
def index_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Every file of a real two-chunk index, by its path inside the index folder."""
    root = tmp_path_factory.mktemp("fuzz-index")
    (root / "a.md").write_text("# Battery\nThe battery lasts 42 minutes.\n", encoding="utf-8")
    (root / "b.md").write_text("# Camera\nThe camera records 4K video.\n", encoding="utf-8")
    crag.ingest([root / "a.md", root / "b.md"], root / "index")
    files = [p for p in (root / "index").rglob("*") if p.is_file() and p.name != ".lock"]
    return {str(p.relative_to(root / "index")): p.read_bytes() for p in files}


def damaged(original: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.integers(0, len(original)).map(lambda n: original[:n]),  # cut short
        st.tuples(st.integers(0, max(0, len(original) - 1)), st.binary(min_size=1, max_size=8)).map(
            lambda t: original[: t[0]] + t[1] + original[t[0] + len(t[1]) :]  # overwritten in place
        ),
        st.binary(max_size=200),
    )


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_using_a_damaged_index_gives_answers_or_index_not_found_error(
    index_files: dict[str, bytes], data: st.DataObject
) -> None:
    """Whatever file is damaged, loading the index and reading all it holds either works or
    says the index is unreadable and how to rebuild it: never another exception."""
    name = data.draw(st.sampled_from(sorted(index_files)))
    content = data.draw(damaged(index_files[name]))
    with tempfile.TemporaryDirectory() as tmp:
        for file, original in index_files.items():
            (Path(tmp) / file).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / file).write_bytes(content if file == name else original)
        try:
            index = ChunkIndex.load(tmp)
            index.warm_up()
            texts = [n.get_content() for n in index.nodes]
            index.bm25.top("battery minutes", 2), index.term_stats.idf("batteri")
        except IndexNotFoundError as exc:
            assert "build it again" in str(exc)
            return
        finally:
            if "index" in locals():
                index.close()
    assert index.embeddings.shape == (len(texts), 256) and index.embeddings.dtype == np.float32


key_alphabet = string.ascii_letters + string.digits + "-_"


@given(st.text(key_alphabet, min_size=12, max_size=40), st.text(max_size=40), st.text(max_size=40))
def test_redact_removes_a_registered_key_wherever_it_stands(key: str, before: str, after: str) -> None:
    register_secret(key)
    try:
        cleaned = redact(before + key + after + key)
    finally:
        crag.errors._secrets.discard(key)  # a key of digits would redact numbers in later tests
    assert key not in cleaned and REDACTED in cleaned


@pytest.fixture(scope="module")
def offline_workflow(tmp_path_factory: pytest.TempPathFactory) -> crag.CorrectiveRAGWorkflow:
    root = tmp_path_factory.mktemp("fuzz-workflow")
    (root / "a.md").write_text("# Battery\nThe battery lasts 42 minutes.\n", encoding="utf-8")
    (root / "b.md").write_text("# Camera\nThe camera records 4K video.\n", encoding="utf-8")
    crag.ingest([root / "a.md", root / "b.md"], root / "index")
    return crag.build_workflow(crag.Settings.load(env={}, index={"path": root / "index"}))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=300), st.lists(reply_parts, max_size=20).map(" ".join)))
def test_any_question_gets_an_answer_or_a_query_error(
    offline_workflow: crag.CorrectiveRAGWorkflow, question: str
) -> None:
    try:
        result = offline_workflow.ask(question)
    except crag.QueryError as exc:
        assert not question.split() and "empty" in str(exc)
        return
    assert result.answer.strip() and result.verdict in crag.Verdict


@given(st.text(alphabet=st.sampled_from(list("ab .!?\n\t'\"U.S.Mr()")), max_size=200))
def test_stored_sentence_spans_give_exactly_the_sentences_splitting_gives(text_: str) -> None:
    from crag.text import sentence_spans, sentences

    assert sentences(text_, sentence_spans(text_)) == sentences(text_)


# OpenAI request bodies: JSON built from the fields and values the door reads, and any bytes.
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["crag", "user", "text", "", "hi"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
        st.sampled_from(["role", "content", "type", "text", "include_usage"]), inner, max_size=3)),
    max_leaves=12,
)
request_fields = st.sampled_from(["model", "messages", "prompt", "stream", "stream_options", "tools", "n",
                                  "response_format", "tool_choice", "echo", "suffix", "logprobs", "best_of"])
request_bodies = st.one_of(
    st.binary(max_size=100),
    st.dictionaries(request_fields, json_values, max_size=6).map(lambda d: json.dumps(d).encode()),
)


@given(request_bodies)
def test_any_openai_request_body_is_read_or_is_a_bad_request(body: bytes) -> None:
    from crag.app.server.openai.legacy import chat_body
    from crag.app.server.openai.request import BadRequest, parse

    for read in (parse, chat_body):
        try:
            read(body)
        except BadRequest as exc:
            assert 400 <= exc.status < 500 and exc.message


question_parts = st.one_of(reply_parts, st.sampled_from(
    ["Helio H10", "Python 3.12", "the", "it", "its", "They", "USB-C", "what", "Does", "Lumen's", "?"]))


@given(st.lists(st.lists(question_parts, max_size=8).map(" ".join), min_size=1, max_size=5),
       st.one_of(st.text(max_size=80), st.lists(question_parts, max_size=8).map(" ".join)))
def test_any_follow_up_keeps_its_words_around_the_one_pronoun_replaced(earlier: list[str], follow_up: str) -> None:
    from crag.events import Turn
    from crag.steps.condensing import RuleCondenser

    history = [Turn(role="user", content=q) for q in earlier]
    standalone = asyncio.run(RuleCondenser().condense(follow_up, history))
    around = re.split(r"\b(?:it|its|they|them|their|he|she|him|her|his)\b", follow_up, maxsplit=1, flags=re.I)
    assert all(part in standalone for part in around)
