"""Document-summary retrieval: summaries written at ingest, documents picked by them."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from llama_index.core.indices.document_summary.base import DEFAULT_SUMMARY_QUERY
from llama_index.core.schema import Document
from support.loopback import LoopbackServer, Reply, openai_chat

from crag import ChunkIndex, Settings, ingest
from crag.app.cli import main
from crag.errors import ConfigError, IngestError, ModelReplyError
from crag.ingestion.configured import summarizer_for
from crag.ingestion.summaries import ExtractiveSummarizer, LLMSummarizer, extractive_summary
from crag.steps.document_summaries import SummaryRetriever, parse_choices
from crag.testing import FakeLLM

BATTERY = (
    "# Zephyr battery\n"
    "The Zephyr battery powers the drone for 42 minutes per charge. "
    "Our office moved to a new building in 2019. "
    "A full Zephyr battery charge takes two hours with the supplied charger. "
    "The battery cells of the Zephyr are lithium polymer, and the battery should be stored at half charge. "
    "Lunch is served at noon.\n"
)
# Long enough to be cut into several chunks by a 48-token splitter.
CAMERA = "# Zephyr camera\n" + " ".join(
    f"The Zephyr camera records 4K video in mode {n} and saves photos in RAW format {n}." for n in range(12)
)
WARRANTY = "# Warranty\nThe warranty covers manufacturing defects for two years. Crash damage is not covered.\n"


def write_docs(folder: Path, docs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def three_docs(tmp_path: Path) -> ChunkIndex:
    """Battery, camera (several chunks) and warranty documents, with extractive summaries."""
    from llama_index.core.node_parser import SentenceSplitter

    docs = write_docs(tmp_path / "docs", {"battery.md": BATTERY, "camera.md": CAMERA, "warranty.md": WARRANTY})
    ingest([docs], tmp_path / "index", node_parser=SentenceSplitter(chunk_size=48, chunk_overlap=0),
           chunker="sentence:48:0", summarize=ExtractiveSummarizer())
    return ChunkIndex.load(tmp_path / "index")


def doc_of(index: ChunkIndex, name: str) -> str:
    """The id of the file `name`'s (first) document: its file's id."""
    from crag.trace import file_id

    return file_id(next(key for key in index.manifest if key.endswith(name)))


# --- extractive summaries -------------------------------------------------------------------


def test_extractive_summary_keeps_the_central_sentences_in_document_order_after_the_title() -> None:
    summary = extractive_summary(BATTERY, "Zephyr battery", max_sentences=3)
    title, body = summary.split("\n")
    assert title == "Zephyr battery"
    assert "office" not in body and "Lunch" not in body and "#" not in body
    assert body.index("42 minutes") < body.index("two hours") < body.index("lithium polymer")
    assert summary == extractive_summary(BATTERY, "Zephyr battery", max_sentences=3)


def test_extractive_summary_is_capped_in_length() -> None:
    summary = extractive_summary(CAMERA, "Zephyr camera", max_sentences=10, max_chars=200)
    assert len(summary) <= 200
    assert extractive_summary("", "Only a title") == "Only a title"


def test_summaries_persist_and_survive_an_incremental_ingest_of_another_file(tmp_path: Path) -> None:
    docs = write_docs(tmp_path / "docs", {"battery.md": BATTERY, "warranty.md": WARRANTY})
    ingest([docs], tmp_path / "index", summarize=ExtractiveSummarizer())
    first = ChunkIndex.load(tmp_path / "index").summaries
    assert len(first) == 2 and "42 minutes" in first[doc_of(ChunkIndex.load(tmp_path / "index"), "battery.md")]

    more = write_docs(tmp_path / "more", {"camera.md": CAMERA})
    ingest([more], tmp_path / "index", summarize=ExtractiveSummarizer())
    after = ChunkIndex.load(tmp_path / "index").summaries
    assert len(after) == 3
    assert {k: after[k] for k in first} == first
    live = ChunkIndex.load(tmp_path / "index").version
    assert json.loads((live / "summaries.json").read_text(encoding="utf-8")) == after


# --- choosing documents by their summaries -------------------------------------------------------


async def test_the_retriever_returns_every_chunk_of_the_best_matching_document(three_docs: ChunkIndex) -> None:
    camera = doc_of(three_docs, "camera.md")
    camera_chunks = [n.node_id for n in three_docs.nodes if n.ref_doc_id == camera]
    assert len(camera_chunks) > 2

    found = await SummaryRetriever(three_docs, documents=1).retrieve("What video resolution does the camera record?")
    assert [c.node.node_id for c in found] == camera_chunks  # all of them, in document order
    assert len({c.score for c in found}) == 1 and found[0].score > 0


async def test_documents_come_best_first_each_chunk_scored_as_its_document(three_docs: ChunkIndex) -> None:
    found = await SummaryRetriever(three_docs, documents=2, vector_weight=None).retrieve(
        "How long does the Zephyr battery charge last?"
    )
    docs = list(dict.fromkeys(c.node.ref_doc_id for c in found))
    assert docs[0] == doc_of(three_docs, "battery.md") and len(docs) == 2
    scores = [c.score for c in found]
    assert scores == sorted(scores, reverse=True)


def test_an_index_without_summaries_is_a_config_error_naming_the_fix(tmp_path: Path) -> None:
    ingest([write_docs(tmp_path / "docs", {"battery.md": BATTERY})], tmp_path / "index")
    with pytest.raises(ConfigError, match=r"crag ingest YOUR_DOCS --summaries"):
        SummaryRetriever(ChunkIndex.load(tmp_path / "index"))


def test_choice_replies_are_parsed_line_by_line() -> None:
    reply = "Here you go:\nDoc: 3, Relevance: 8\ndoc 1, relevance 4.5\nDoc: 11, Relevance: 9\nDoc: 0, Relevance: 9"
    assert parse_choices(reply, 10) == [(2, 8.0), (0, 4.5)]
    with pytest.raises(ModelReplyError, match="Doc: N, Relevance: R"):
        parse_choices("The second document, I think.", 10)


def number_of(prompt: str, text: str) -> int:
    """The number the choice-select prompt gave the document whose summary contains `text`."""
    for number, body in re.findall(r"Document (\d+):\n(.*?)(?=\n\nDocument \d+:|\nQuestion:)", prompt, re.S):
        if text in body:
            return int(number)
    raise AssertionError(f"{text!r} not in the prompt")


async def test_an_llm_picks_documents_by_summary_with_its_relevance_as_the_score(three_docs: ChunkIndex) -> None:
    llm = FakeLLM(reply=lambda prompt: f"Doc: {number_of(prompt, 'warranty covers')}, Relevance: 7")
    retriever = SummaryRetriever(three_docs, documents=2, choice="llm", llm=llm)
    found = await retriever.retrieve("What is the Zephyr camera's video resolution?")
    assert {c.node.ref_doc_id for c in found} == {doc_of(three_docs, "warranty.md")}  # the model's pick, not the embedding's
    assert {c.score for c in found} == {0.7}
    assert "Relevance" in llm.calls[0] and "What is the Zephyr camera's video resolution?" in llm.calls[0]


async def test_a_malformed_llm_choice_falls_back_to_the_embedding_choice(
    three_docs: ChunkIndex, caplog: pytest.LogCaptureFixture
) -> None:
    query = "What video resolution does the camera record?"
    llm = FakeLLM(reply=lambda prompt: "The camera one, probably.")
    with caplog.at_level(logging.WARNING, logger="crag.steps.document_summaries"):
        found = await SummaryRetriever(three_docs, documents=1, choice="llm", llm=llm).retrieve(query)
    expected = await SummaryRetriever(three_docs, documents=1).retrieve(query)
    assert [c.node.node_id for c in found] == [c.node.node_id for c in expected]
    assert len(llm.calls) == 1 and "used the embedding choice" in caplog.text


# --- summaries by a model: the real OpenAI client against a loopback server ------------------------


def llm_settings(server: LoopbackServer, **llm: object) -> Settings:
    return Settings.load(env={"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-test"}, llm=llm)


def test_llm_summaries_use_llama_index_summary_query_through_the_openai_client() -> None:
    documents = [Document(text=BATTERY, id_="battery", metadata={"title": "Zephyr battery"}),
                 Document(text=WARRANTY, id_="warranty", metadata={"title": "Warranty"})]
    reply = lambda prompt: "About the battery." if "42 minutes" in prompt else "About the warranty."  # noqa: E731
    with LoopbackServer(openai_chat(reply)) as server:
        summarize = summarizer_for(llm_settings(server))
        assert isinstance(summarize, LLMSummarizer)
        summaries = summarize(documents)
    assert summaries == {"battery": "Zephyr battery\nAbout the battery.", "warranty": "Warranty\nAbout the warranty."}
    assert len(server.requests_to("/chat/completions")) == 2
    assert all(DEFAULT_SUMMARY_QUERY.strip() in json.dumps(r.json) for r in server.requests)


def test_a_failing_summary_call_is_a_clear_error_and_the_index_is_kept(tmp_path: Path) -> None:
    docs = write_docs(tmp_path / "docs", {"battery.md": BATTERY})
    ingest([docs], tmp_path / "index", summarize=ExtractiveSummarizer())
    before = {str(p): p.read_bytes() for p in (tmp_path / "index").rglob("*") if p.is_file()}
    write_docs(tmp_path / "more", {"warranty.md": WARRANTY})
    failing = lambda prompt: Reply(500, {"error": {"message": "model overloaded"}})  # noqa: E731
    with LoopbackServer(openai_chat(failing)) as server:
        summarize = summarizer_for(llm_settings(server, max_retries=0))
        with pytest.raises(IngestError, match=r"Summarizing document 'warranty.md' \(\w+\) failed .*nothing was written"):
            ingest([tmp_path / "more"], tmp_path / "index", summarize=summarize)
    assert {str(p): p.read_bytes() for p in (tmp_path / "index").rglob("*") if p.is_file()} == before


# --- end to end ----------------------------------------------------------------------------------


def test_ingest_with_summaries_then_ask_with_the_summary_retriever(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = write_docs(tmp_path / "docs", {"battery.md": BATTERY, "camera.md": CAMERA, "warranty.md": WARRANTY})
    index = str(tmp_path / "index")
    assert main(["ingest", str(docs), "--summaries", "--index", index, "-q"]) == 0
    capsys.readouterr()
    assert main(["ask", "How long does the Zephyr battery last per charge?", "--retriever", "summary",
                 "--index", index, "-q", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "42 minutes" in out["answer"] and out["verdict"] != "incorrect"
    battery_doc = doc_of(ChunkIndex.load(index), "battery.md")
    assert out["sources"] and all(s["doc_id"] == battery_doc for s in out["sources"])
    graded = [g["chunk_id"] for g in out["grades"]]
    battery = [n.node_id for n in ChunkIndex.load(index).nodes if n.ref_doc_id == battery_doc]
    assert graded[: len(battery)] == battery  # the best document's chunks come first
    assert "retrieve" in out["steps"] and "synthesize" in out["steps"]


def test_asking_the_summary_retriever_of_an_index_without_summaries_fails_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = str(tmp_path / "index")
    assert main(["ingest", str(write_docs(tmp_path / "docs", {"battery.md": BATTERY})), "--index", index, "-q"]) == 0
    capsys.readouterr()
    assert main(["ask", "How long does the battery last?", "--retriever", "summary", "--index", index, "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error:") and "--summaries" in err


def test_ingest_without_summaries_keeps_those_already_written(tmp_path: Path) -> None:
    docs = write_docs(tmp_path / "docs", {"battery.md": BATTERY})
    ingest([docs], tmp_path / "index", summarize=ExtractiveSummarizer())
    written = ChunkIndex.load(tmp_path / "index").summaries
    write_docs(tmp_path / "more", {"warranty.md": WARRANTY})
    ingest([tmp_path / "more"], tmp_path / "index")
    assert ChunkIndex.load(tmp_path / "index").summaries == written


def test_asking_for_summaries_of_an_up_to_date_index_summarizes_every_document(tmp_path: Path) -> None:
    docs = write_docs(tmp_path / "docs", {"battery.md": BATTERY, "warranty.md": WARRANTY})
    ingest([docs], tmp_path / "index")
    assert ChunkIndex.load(tmp_path / "index").summaries == {}
    ingest([docs], tmp_path / "index", summarize=ExtractiveSummarizer())
    index = ChunkIndex.load(tmp_path / "index")
    assert set(index.summaries) == {n.ref_doc_id for n in index.nodes}


async def test_the_summary_retriever_reads_no_chunk_it_does_not_return(
    three_docs: ChunkIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crag.index.store import NodeFile

    monkeypatch.setattr(NodeFile, "__iter__", lambda self: pytest.fail("read every chunk to group them"))
    found = await SummaryRetriever(ChunkIndex.load(three_docs.path), documents=1).retrieve("camera video")
    assert found and len({c.node.ref_doc_id for c in found}) == 1
