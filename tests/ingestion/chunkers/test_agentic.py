"""Agentic chunking: propositions grouped into titled, summarised chunks, offline and by a chat model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import Document, NodeRelationship
from support.loopback import LoopbackServer, openai_chat
from support.paths import SAMPLES

import crag
from crag.app.cli import main
from crag.errors import ModelReplyError
from crag.ingestion.chunkers.agentic import (
    AgenticChunker,
    parse_choice,
    parse_propositions,
    parse_title_summary,
)
from crag.ingestion.chunkers.propositions import (
    group_by_centroid,
    offline_propositions,
    resolve_pronouns,
)
from crag.ingestion.configured import node_parser_for
from crag.testing import FakeLLM

VOLCANO = [
    "The volcano erupted in 1815.",
    "Ash from the volcano covered nearby villages.",
    "The eruption cooled the global climate.",
    "Volcanic gases reached the stratosphere.",
]
BAKERY = [
    "The bakery sells fresh bread every morning.",
    "Croissants and baguettes are baked before dawn.",
    "The bakery's sourdough uses a century-old starter.",
]
# The two topics take turns, as they would in a rambling document.
INTERLEAVED = " ".join(
    [VOLCANO[0], BAKERY[0], VOLCANO[1], BAKERY[1], VOLCANO[2], BAKERY[2], VOLCANO[3]]
)


def chunks_of(text: str, **options: object) -> list:
    return AgenticChunker(**options).get_nodes_from_documents([Document(text=text, id_="doc")])


# --- offline -------------------------------------------------------------------------------------


def test_interleaved_topics_are_grouped_into_two_titled_chunks() -> None:
    nodes = chunks_of(INTERLEAVED, threshold=0.2)

    assert [n.get_content() for n in nodes] == [" ".join(VOLCANO), " ".join(BAKERY)]
    assert "volcano" in nodes[0].metadata["chunk_title"].lower()
    assert "bakery" in nodes[1].metadata["chunk_title"].lower()
    assert nodes[0].metadata["chunk_summary"] in VOLCANO and nodes[1].metadata["chunk_summary"] in BAKERY


def test_a_higher_threshold_never_gives_fewer_chunks() -> None:
    counts = [len(chunks_of(INTERLEAVED, threshold=t)) for t in (-1.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)]

    assert counts == sorted(counts)
    assert counts[0] == 1 and counts[-1] == len(VOLCANO) + len(BAKERY)  # all together; each alone


def test_a_full_chunk_takes_no_more_propositions() -> None:
    nodes = chunks_of(" ".join(VOLCANO), threshold=-1.0, max_tokens=20)

    assert len(nodes) > 1
    assert all(len(n.get_content().split()) <= 20 for n in nodes)
    assert " ".join(n.get_content() for n in nodes) == " ".join(VOLCANO)  # nothing lost, order kept


def test_chunks_stay_within_their_document_and_point_to_it() -> None:
    docs = [Document(text=" ".join(VOLCANO), id_="volcano"), Document(text=" ".join(BAKERY), id_="bakery")]
    nodes = AgenticChunker(threshold=-1.0).get_nodes_from_documents(docs)

    assert [(n.ref_doc_id, n.get_content()) for n in nodes] == [(d.doc_id, d.text) for d in docs]
    assert all(n.relationships[NodeRelationship.SOURCE].node_id == n.ref_doc_id for n in nodes)
    # The title and summary are metadata the embedding does not see; the chunk's text is its propositions.
    assert {"chunk_title", "chunk_summary"} <= set(nodes[0].excluded_embed_metadata_keys)


def test_progress_counts_documents_chunked() -> None:
    seen: list[tuple[str, int, int]] = []
    docs = [Document(text=" ".join(VOLCANO), id_="a"), Document(text=" ".join(BAKERY), id_="b")]
    AgenticChunker(progress=lambda *report: seen.append(report)).get_nodes_from_documents(docs)

    assert seen == [("chunk", 0, 2), ("chunk", 1, 2), ("chunk", 2, 2)]


def test_an_empty_document_gives_no_chunks() -> None:
    assert chunks_of("   \n\n ") == []


def test_centroid_grouping_follows_the_vectors() -> None:
    east, north = np.array([1.0, 0.0], dtype=np.float32), np.array([0.0, 1.0], dtype=np.float32)
    vectors = np.stack([east, north, east, north, east])

    assert group_by_centroid(vectors, [1] * 5, threshold=0.5, max_size=10) == [[0, 2, 4], [1, 3]]
    assert group_by_centroid(vectors, [1] * 5, threshold=0.5, max_size=2) == [[0, 2], [1, 3], [4]]


# --- pronoun resolution --------------------------------------------------------------------------


def test_leading_pronouns_become_the_latest_subject() -> None:
    sents = [
        "Marie Curie was a physicist.",
        "She won two Nobel Prizes.",
        "Her daughter Irène also won one.",
        "The Normans settled in France.",
        "They gave their name to Normandy.",
        "Their dukes ruled England after 1066.",
    ]
    assert resolve_pronouns(sents) == [
        "Marie Curie was a physicist.",
        "Marie Curie won two Nobel Prizes.",
        "Marie Curie's daughter Irène also won one.",
        "The Normans settled in France.",
        "The Normans gave their name to Normandy.",
        "The Normans' dukes ruled England after 1066.",
    ]


def test_a_word_capitalised_only_because_it_opens_a_sentence_is_no_subject() -> None:
    sents = ["Warsaw lies on the Vistula.", "However, winters are cold.", "It has two million people."]

    assert resolve_pronouns(sents)[2] == "Warsaw has two million people."
    assert resolve_pronouns(["Arvas is a band.", "In Summer 1996 Arvas toured.", "They split."])[2] == "Arvas split."
    assert resolve_pronouns(["Jon C. Madonna was born in 1943.", "He ran KPMG."])[1] == "Jon C. Madonna ran KPMG."


def test_this_is_resolved_as_a_pronoun_but_not_as_a_determiner() -> None:
    sents = ["The Yuan dynasty ruled China.", "This was the first foreign dynasty.", "This dynasty fell in 1368."]

    assert resolve_pronouns(sents)[1:] == ["The Yuan was the first foreign dynasty.", "This dynasty fell in 1368."]


def test_without_a_subject_pronouns_stay_and_a_short_title_stands_in() -> None:
    assert resolve_pronouns(["It rained."]) == ["It rained."]
    assert offline_propositions("It rained. It stopped.", "Warsaw", resolve=True) == ["Warsaw rained.", "Warsaw stopped."]
    assert offline_propositions("It rained.", "Warsaw", resolve=False) == ["It rained."]


# --- a chat model --------------------------------------------------------------------------------


def scripted(prompt: str, *, propositions: str | None = None, choice: str | None = None) -> str:
    """A model that splits into VOLCANO + BAKERY, files each under its topic, titles each topic."""
    if prompt.startswith("Decompose"):
        return propositions if propositions is not None else json.dumps(VOLCANO[:2] + BAKERY[:2])
    if prompt.startswith("You group"):
        if choice is not None:
            return choice
        topic = "Volcano" if "volcan" in prompt.split("Proposition:")[1].lower() else "Bakery"
        found = re.search(rf"(c\d+): {topic}:", prompt)
        return found.group(1) if found else "new"
    topic = "Volcano" if "volcan" in prompt.lower() else "Bakery"
    return f'```json\n{{"title": "{topic}", "summary": "About the {topic.lower()}."}}\n```'


async def test_with_a_model_propositions_go_to_the_chunk_it_chooses() -> None:
    llm = FakeLLM(reply=scripted)
    nodes = await AgenticChunker(llm=llm).aget_nodes_from_documents([Document(text=INTERLEAVED, id_="doc")])

    assert [n.get_content() for n in nodes] == [" ".join(VOLCANO[:2]), " ".join(BAKERY[:2])]
    assert [(n.metadata["chunk_title"], n.metadata["chunk_summary"]) for n in nodes] == [
        ("Volcano", "About the volcano."),
        ("Bakery", "About the bakery."),
    ]
    assert not any("chunker_note" in n.metadata for n in nodes)
    # One passage split; then per proposition a choice (but for the first) and a title update.
    kinds = [c.split(" ", 1)[0] for c in llm.calls]
    assert kinds == ["Decompose", "These", "You", "These", "You", "These", "You", "These"]


def test_malformed_replies_fall_back_to_the_offline_method_with_a_note() -> None:
    llm = FakeLLM(reply=lambda p: scripted(p, propositions="Sure! Volcanoes and bread.", choice="maybe"))
    nodes = AgenticChunker(llm=llm, threshold=0.2).get_nodes_from_documents([Document(text=INTERLEAVED, id_="d")])

    # The passage's sentences stand in for propositions, the centroids for the model's choices.
    assert [n.get_content() for n in nodes] == [" ".join(VOLCANO), " ".join(BAKERY)]
    note = nodes[0].metadata["chunker_note"]
    assert "LLM propositions unusable" in note and "LLM assignment unusable" in note
    assert nodes[0].metadata["chunk_title"] == "Volcano"  # the well-formed title replies still count


def test_an_unusable_title_reply_gets_keywords_instead() -> None:
    llm = FakeLLM(reply=lambda p: "no idea" if p.startswith("These") else scripted(p))
    nodes = AgenticChunker(llm=llm).get_nodes_from_documents([Document(text=INTERLEAVED, id_="doc")])

    assert "volcano" in nodes[0].metadata["chunk_title"].lower()
    assert nodes[0].metadata["chunk_summary"] in VOLCANO
    assert "LLM title unusable" in nodes[0].metadata["chunker_note"]


def test_a_chosen_chunk_that_is_full_gets_a_new_one() -> None:
    llm = FakeLLM(reply=lambda p: scripted(p, choice="c1"))
    nodes = AgenticChunker(llm=llm, max_tokens=12).get_nodes_from_documents([Document(text=INTERLEAVED, id_="d")])

    assert len(nodes) > 1 and all(len(n.get_content().split()) <= 12 for n in nodes)


def test_replies_are_parsed_strictly_but_forgivingly() -> None:
    assert parse_propositions('Here you go:\n```json\n["A is B.", " ", "C is D."]\n```') == ["A is B.", "C is D."]
    assert parse_choice('{"chunk": "C2"}', 3) == 1 and parse_choice("new", 3) is None
    assert parse_title_summary('{"title": "T", "summary": "S."}') == ("T", "S.")
    for bad in ('{"a": 1}', "[1, 2]", "[]", "no list here"):
        with pytest.raises(ModelReplyError, match="propositions"):
            parse_propositions(bad)
    with pytest.raises(ModelReplyError, match="c9 does not exist"):
        parse_choice("c9", 3)
    with pytest.raises(ModelReplyError, match="no chunk id"):
        parse_choice("the first one", 3)
    with pytest.raises(ModelReplyError, match="title and a summary"):
        parse_title_summary('{"title": "T"}')


def agentic_chunker(settings: crag.Settings) -> tuple[AgenticChunker, str]:
    """The agentic chunker the ingest's wiring builds from `settings`."""
    index = settings.index.model_copy(update={"chunker": "agentic"})
    parser, signature = node_parser_for(settings.model_copy(update={"index": index}))
    assert isinstance(parser, AgenticChunker)
    return parser, signature


def test_settings_pick_the_method_and_the_signature_names_it() -> None:
    parser, signature = agentic_chunker(crag.Settings.load(env={}, index={"agentic_threshold": 0.3}))
    assert parser.llm is None and parser.threshold == 0.3 and signature.startswith("agentic:offline:0.3:")

    _, plain = agentic_chunker(crag.Settings.load(env={}, index={"agentic_pronouns": False}))
    assert plain != agentic_chunker(crag.Settings.load(env={}))[1]

    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_MODEL": "m1"}
    parser, signature = agentic_chunker(crag.Settings.load(env=env))
    assert parser.llm is not None and signature.startswith("agentic:llm:m1:")


def test_the_real_openai_client_chunks_through_a_chat_completions_server(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "mixed.txt").write_text(INTERLEAVED, encoding="utf-8")
    with LoopbackServer(openai_chat(scripted)) as server:
        env = {"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-test", "OPENAI_MODEL": "loop-1"}
        parser, signature = agentic_chunker(crag.Settings.load(env=env))
        crag.ingest([tmp_path / "docs"], tmp_path / "index", node_parser=parser, chunker=signature)
        calls = len(server.requests_to("/chat/completions"))

    index = crag.ChunkIndex.load(tmp_path / "index")
    assert [n.metadata["chunk_title"] for n in index.nodes] == ["Volcano", "Bakery"]
    assert index.chunker == signature and calls == 8 and not server.errors


# --- end to end ----------------------------------------------------------------------------------


def test_cli_ingests_agentic_chunks_and_answers_citing_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index_dir = tmp_path / "index"
    assert main(["ingest", str(SAMPLES / "docs"), "--index", str(index_dir), "--chunker", "agentic", "-q"]) == 0
    capsys.readouterr()

    assert main(["ask", "What warranty does Lumen give on the Helio H10?", "--index", str(index_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    index = crag.ChunkIndex.load(index_dir)
    chunks = {n.node_id: n for n in index.nodes}
    cited = [chunks[s["id"]] for s in out["sources"] if s["kind"] == "internal"]
    assert index.chunker.startswith("agentic:offline:")
    assert out["verdict"] == "correct" and "12-year" in out["answer"]
    assert cited and all(c.metadata["chunk_title"] and c.metadata["chunk_summary"] for c in cited)
