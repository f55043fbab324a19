"""Multi-hop questions: decomposers find the hops, the workflow follows them.

The workflow tests use a tiny corpus of two linked passages: a bridge question about the
first names a thing only the second one describes (the offline bridge: tests/steps/test_bridging.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.corpus import FILLER, write_jsonl
from support.loopback import LoopbackServer, openai_chat

import crag
from crag.steps.decomposition import (
    LLMDecomposer,
    describes_a_thing,
    names_a_subject,
    parse_parts,
    split_comparison,
)

SAUNDERS = {
    "doc_id": "saunders", "title": "Lucy Saunders",
    "text": "Lucy Saunders is an American writer of cookbooks about beer. She contributed essays to "
    "\"Beer Hunter, Whisky Chaser\" in honor of Michael Jackson (writer), a British author.",
}
JACKSON = {
    "doc_id": "jackson", "title": "Michael Jackson (writer)",
    "text": "Michael James Jackson was an English writer and journalist. He was the author of many "
    "influential books about beer and whisky.",
}
BRIDGE = ("What did the writer write many books about, in whose honor Lucy Saunders contributed essays "
          "to \"Beer Hunter, Whisky Chaser\"?")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The index holds the second hop's passage, the web the first's (and fillers both)."""
    root = tmp_path_factory.mktemp("hops")
    crag.ingest([write_jsonl(root / "docs.jsonl", [JACKSON, *FILLER[:3]])], root / "index")
    write_jsonl(root / "web.jsonl", [SAUNDERS, *FILLER[:3]])
    return root


def offline(corpus: Path, **sections) -> crag.Settings:
    return crag.Settings.load(env={}, index={"path": corpus / "index"},
                              web_search={"corpus": corpus / "web.jsonl"}, **sections)


# --- the rules ---------------------------------------------------------------------------


def test_a_comparison_of_two_names_splits_into_one_question_per_name() -> None:
    assert split_comparison("Who was born earlier, Thomas Wolfe or Margaret Wilson?") == [
        "Who was born earlier, Thomas Wolfe?", "Who was born earlier, Margaret Wilson?"]
    assert split_comparison("Are Joe Elliott and Paul Meany both keyboardists?") == [
        "Are Joe Elliott both keyboardists?", "Are Paul Meany both keyboardists?"]
    assert split_comparison("Did the Battle of Pusan Perimeter or the Battle of Peleliu happen first?") == [
        "Did the Battle of Pusan Perimeter happen first?", "Did the Battle of Peleliu happen first?"]


def test_a_question_that_names_one_thing_does_not_split() -> None:
    assert split_comparison("How long does the Zephyr battery last?") == []
    assert split_comparison("Who invented the lithium-ion battery?") == []


def test_a_question_describing_its_subject_is_a_bridge_and_one_naming_it_is_not() -> None:
    assert describes_a_thing("In what year was the journalist who hosted \"The Real Story\" born?")
    assert describes_a_thing("When was the low-brow art magazine of which George Petros was an editor founded?")
    assert not describes_a_thing("Who invented the lithium-ion battery?")
    assert not describes_a_thing("What is Ada Lovelace known for?")


def test_a_hop_keeps_only_documents_titled_with_the_thing_it_names() -> None:
    about = names_a_subject("Michael Jackson books")
    assert about("Michael Jackson (writer)") and not about("Lucy Saunders") and not about(None)
    assert names_a_subject("what year born")("Anything")  # a question naming nothing keeps all


# --- the model -------------------------------------------------------------------------------


def test_parse_parts_reads_a_json_list_and_rejects_anything_else() -> None:
    assert parse_parts('```json\n["When was X founded?", "When was Y founded?"]\n```') == [
        "When was X founded?", "When was Y founded?"]
    assert parse_parts("[]") == []
    for reply in ("X and Y", '{"parts": []}', "[1, 2]"):
        with pytest.raises(crag.DecomposeParseError):
            parse_parts(reply)


async def test_the_model_decomposer_asks_only_about_flagged_questions() -> None:
    with LoopbackServer(openai_chat(lambda p: '["When did X start?", "When did Y start?"]')) as server:
        settings = crag.Settings.load(env={"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-test"})
        from crag.models import LLMFactory

        decomposer = LLMDecomposer(LLMFactory(settings.llm).llm)
        assert await decomposer.split("Who invented the lithium-ion battery?") == []
        assert not server.requests  # a simple question costs no call
        parts = await decomposer.split("Which magazine started first, Arthur's Magazine or First for Women?")
    assert parts == ["When did X start?", "When did Y start?"] and len(server.requests) == 1


# --- the workflow ----------------------------------------------------------------------------


async def test_a_bridge_question_takes_a_second_hop_and_the_answer_cites_both_passages(corpus: Path) -> None:
    result = await crag.build_workflow(offline(corpus)).run(query=BRIDGE)
    assert "books about beer and whisky" in result.answer
    assert {s.doc_id for s in result.sources} >= {"saunders", "jackson"}
    assert "hop" in result.steps and "crag hopped to “Michael Jackson" in result.trace.explanation.rule


async def test_the_hop_shows_what_it_ran_inside_as_sub_steps_in_the_trace_and_on_the_page(corpus: Path) -> None:
    from crag.app.render import trace_html

    result = await crag.build_workflow(offline(corpus)).run(query=BRIDGE)
    hop = next(r for r in result.trace.steps if r.name == "hop")
    names = [s.name for s in hop.substeps]
    hop_1 = [n.split(": ")[1] for n in names if n.startswith("hop to “Michael Jackson")]
    assert hop_1[:2] == ["retrieve", "grade"] and hop_1[-1] == "refine"
    assert all(hop.started <= s.started <= s.ended <= hop.ended for s in hop.substeps)
    searched = sum(s.search_calls for s in hop.substeps if s.name.endswith("web_search"))
    assert hop.search_calls == 0 and result.trace.search_calls >= searched, "a hop's searches are its sub-steps'"
    restored = crag.CragResult.model_validate_json(result.model_dump_json())
    assert [s.name for s in next(r for r in restored.trace.steps if r.name == "hop").substeps] == names
    page = trace_html(crag.CorrectiveRAGWorkflow, result.trace)
    assert "└ hop to “Michael Jackson" in page


async def test_without_a_decomposer_the_same_question_takes_no_second_hop(corpus: Path) -> None:
    result = await crag.build_workflow(offline(corpus, decomposer={"kind": "none"})).run(query=BRIDGE)
    # The second hop's passage may still reach the answer as a retrieved chunk above `lower`
    # (an Ambiguous verdict keeps it), but no hop retrieves for the bridge.
    assert "hop" not in result.steps


async def test_a_simple_question_judged_correct_passes_through_without_a_search(corpus: Path) -> None:
    result = await crag.build_workflow(offline(corpus)).run(query="When did the railway reach the valley?")
    hop = next(r for r in result.trace.steps if r.name == "hop")
    assert result.verdict is crag.Verdict.CORRECT
    assert hop.search_calls == 0 and result.trace.search_calls == 0
    assert "another hop" not in result.trace.explanation.rule


async def test_a_model_decomposer_with_a_malformed_reply_falls_back_to_the_rules(corpus: Path) -> None:
    def reply(prompt: str) -> str:
        if prompt.startswith("Does the question below compare"):
            return "two questions, sorry"
        return "9" if "Rate how relevant" in prompt else "An answer [1]."

    with LoopbackServer(openai_chat(reply)) as server:
        settings = offline(corpus, llm={"base_url": server.url + "/v1", "api_key": "sk-test"})
        workflow = crag.build_workflow(settings)
        result = await workflow.run(query="Which came first, the Harbour or the Railway?")
    assert any("decomposer failed" in d and "used the rules" in d for d in result.degraded)
    assert workflow.hops.bridger is None  # with a model, the model writes a bridge's next question
