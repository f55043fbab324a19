"""The offline bridge: a question the first hop answered only in part takes a second hop to the
thing its best strips name, and the answer starts with what that hop found.

The workflow tests use a tiny generated corpus: a passage that names the bridge ("Reflektor"
is by Arcade Fire), and the passage under the bridge's title that answers ("Arcade Fire" is
based in Montreal); retrieval returns one chunk, and there is no web search, so only a second
hop can find the answer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.corpus import FILLER, write_jsonl

import crag
from crag.events import Bridge, Strip
from crag.interfaces import BridgeFinder
from crag.steps.bridging import LexicalBridgeFinder, answers
from crag.text import TermStats

REFLEKTOR = {
    "doc_id": "reflektor", "title": "Reflektor",
    "text": "Reflektor is the fourth studio album recorded by the indie rock band Arcade Fire. "
    "It was released in October 2013 on Merge Records.",
}
ARCADE_FIRE = {
    "doc_id": "arcade-fire", "title": "Arcade Fire",
    "text": "The band was formed in 2001 by Win Butler and Régine Chassagne. "
    "Arcade Fire is an indie rock band based in Montreal, Quebec.",
}
BRIDGE = "In which city is the band that recorded Reflektor based?"


def strip(text: str, score: float = 0.5, title: str | None = None) -> Strip:
    return Strip(text=text, source_id=text[:10], kind="internal", score=score, title=title)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bridge")
    crag.ingest([write_jsonl(root / "docs.jsonl", [REFLEKTOR, ARCADE_FIRE, *FILLER])], root / "index")
    return root


def offline(corpus: Path, **sections: object) -> crag.Settings:
    return crag.Settings.load(env={}, index={"path": corpus / "index"}, retriever={"top_k": 1},
                              web_search={"kind": "none"}, **sections)


# --- finding the bridge ------------------------------------------------------------------------


def test_the_offline_finder_is_a_bridge_finder() -> None:
    assert isinstance(LexicalBridgeFinder(), BridgeFinder)


async def test_the_bridge_is_a_name_the_best_strip_holds_and_the_residual_what_it_left_uncovered() -> None:
    found = [strip("The Real Story is a program hosted by journalist Gretchen Carlson.", 0.6, "The Real Story")]
    question = "In what year was the journalist who hosted \"The Real Story\" born?"
    [bridge] = await LexicalBridgeFinder().bridges(question, found)
    assert bridge == Bridge(entity="Gretchen Carlson", found_in="The Real Story", residual="year born",
                            query="Gretchen Carlson year born", graded_against=f"{question} Gretchen Carlson")


async def test_a_best_strip_from_a_document_the_question_does_not_name_makes_its_title_the_bridge() -> None:
    found = [strip("He became the drivers' world champion in 1995 with Subaru.", 0.7, "Colin McRae")]
    bridges = await LexicalBridgeFinder().bridges("Where was the drivers' world champion of 1995 born?", found)
    assert [b.entity for b in bridges] == ["Colin McRae", "Subaru"]
    assert bridges[0].query == "Colin McRae born"


async def test_a_title_named_by_the_question_is_no_bridge_even_with_a_qualifier() -> None:
    found = [strip("Reflektor is a song by Arcade Fire.", 0.7, "Reflektor (song)")]
    bridges = await LexicalBridgeFinder().bridges(BRIDGE, found)
    assert [b.entity for b in bridges] == ["Arcade Fire"]


async def test_a_first_hop_that_covers_the_whole_question_takes_no_second_hop() -> None:
    found = [strip("The railway reached the valley in 1871, built by Thomas Brassey.", 0.9, "Railway")]
    assert await LexicalBridgeFinder().bridges("When did the railway reach the valley?", found) == []


async def test_dates_and_names_of_common_words_are_no_bridge() -> None:
    found = [strip("Lord Frederick Cavendish (30 November 1836 – 6 May 1882) was an English Liberal politician "
                   "and protégé of the Prime Minister, William Ewart Gladstone.", 0.7, "Lord Frederick Cavendish")]
    question = "When did the man who Lord Frederick Cavendish was a protege of last serve as Prime Minister?"
    names = [b.entity for b in LexicalBridgeFinder().find(question, found)]
    assert names == ["English Liberal", "William Ewart Gladstone"]
    stats = TermStats.from_texts([f"An English Liberal of note, number {i}." for i in range(20)])
    assert [b.entity for b in LexicalBridgeFinder(stats).find(question, found)] == ["William Ewart Gladstone"]


async def test_no_new_name_means_no_bridge() -> None:
    found = [strip("The Real Story is a program on a news channel.", 0.6, "The Real Story")]
    assert await LexicalBridgeFinder().bridges("In what year was the journalist who hosted \"The Real Story\" born?",
                                               found) == []


def test_a_strip_answers_its_bridge_when_it_is_about_the_bridge_and_says_what_was_asked() -> None:
    bridge = Bridge(entity="Arcade Fire", residual="city recorded based", query="Arcade Fire city recorded based",
                    graded_against=f"{BRIDGE} Arcade Fire")
    assert answers(bridge, strip("It is a band based in Montreal.", title="Arcade Fire"))
    assert not answers(bridge, strip("Arcade Fire toured in 2013.", title="Reflektor"))  # nothing asked of it
    assert not answers(bridge, strip("The city of Montreal is based on an island.", title="Montreal"))  # not about it
    read_in = bridge.model_copy(update={"found_in": "Arcade Fire"})  # the bridge was read in its own document
    assert not answers(read_in, strip("It is a band based in Montreal.", title="Arcade Fire"))


# --- the workflow ------------------------------------------------------------------------------


async def test_a_bridge_question_is_answered_offline_by_the_second_hop_with_the_answer_first(corpus: Path) -> None:
    result = await crag.build_workflow(offline(corpus)).run(query=BRIDGE)
    first = result.answer.split(" [")[0]
    assert "Montreal" in first, "the sentence the second hop found leads the answer"
    assert {s.doc_id for s in result.sources} >= {"reflektor", "arcade-fire"}
    hop = result.trace.explanation.hops[0]
    assert (hop.bridge, hop.found_in) == ("Arcade Fire", "Reflektor")
    assert hop.question.startswith("Arcade Fire") and hop.graded_against == f"{BRIDGE} Arcade Fire"
    assert hop.found == ["Arcade Fire"] and not hop.searched
    assert "crag hopped to “Arcade Fire” (read in “Reflektor”)" in result.trace.explanation.rule
    steps = next(r for r in result.trace.steps if r.name == "hop").substeps
    assert [s.name for s in steps if "Arcade Fire" in s.name] == [
        "hop to “Arcade Fire”: retrieve", "hop to “Arcade Fire”: grade", "hop to “Arcade Fire”: refine"]


async def test_without_the_second_hop_the_bridge_question_goes_unanswered(corpus: Path) -> None:
    result = await crag.build_workflow(offline(corpus, decomposer={"kind": "none"})).run(query=BRIDGE)
    assert "hop" not in result.steps and "Montreal" not in result.answer


async def test_a_single_hop_question_takes_no_second_hop(corpus: Path) -> None:
    result = await crag.build_workflow(offline(corpus)).run(query="When did the railway reach the valley?")
    hop = next(r for r in result.trace.steps if r.name == "hop")
    assert hop.substeps == [] and result.trace.explanation.hops == []
    assert result.answer.startswith("The railway reached the valley in 1871")


class TwoBridges:
    """Two bridges whatever the strips: each names a band the corpus does not hold."""

    async def bridges(self, question: str, strips: list[Strip]) -> list[Bridge]:
        return [Bridge(entity=name, residual="city based", query=f"{name} city based",
                       graded_against=f"{question} {name}") for name in ("Glass Harbour", "Velvet Quarry")]


class CountingSearch:
    def __init__(self) -> None:
        self.queries: list[str] = []

    async def search(self, query: str) -> list:
        self.queries.append(query)
        return []


async def test_a_runs_bridge_hops_make_one_web_search_between_them(corpus: Path) -> None:
    """Each is a paid call with a search API: two bridges the documents do not answer share one."""
    search = CountingSearch()
    workflow = crag.build_workflow(offline(corpus), bridger=TwoBridges(), web_search=search)
    result = await workflow.run(query=BRIDGE)
    hops = [q for q in search.queries if q.endswith("city based")]
    assert len(hops) == 1
    assert sorted(hop.searched for hop in result.trace.explanation.hops) == [False, True]


class SecondBridgeGradedFirst:
    """The offline grader, except that the first bridge's hop is graded only once the second's is."""

    def __init__(self, corpus: Path) -> None:
        from crag.index.store import ChunkIndex
        from crag.steps.grading import LexicalEvaluator

        self.inner = LexicalEvaluator(ChunkIndex.load(corpus / "index").term_stats)
        self.second_graded = asyncio.Event()

    async def grade(self, query: str, chunks: list) -> list:
        if "Glass Harbour" in query:
            await self.second_graded.wait()
        grades = await self.inner.grade(query, chunks)
        if "Velvet Quarry" in query:
            self.second_graded.set()
        return grades


async def test_the_runs_web_search_goes_to_the_first_bridge_whichever_hop_is_graded_first(corpus: Path) -> None:
    """The same question gets the same answer from run to run: the hops run at once, and the
    search is the first bridge's (the best strip's) even when the second's grading ends first."""
    search = CountingSearch()
    workflow = crag.build_workflow(offline(corpus), bridger=TwoBridges(), web_search=search,
                                   grader=SecondBridgeGradedFirst(corpus))
    result = await workflow.run(query=BRIDGE)
    assert [q for q in search.queries if q.endswith("city based")] == ["Glass Harbour city based"]
    assert [hop.searched for hop in result.trace.explanation.hops] == [True, False]


async def test_a_hop_that_fails_before_it_decides_does_not_hold_up_the_hops_after_it() -> None:
    from crag.steps.hopping import _SearchesInOrder

    searches = _SearchesInOrder(1, 3)
    second = asyncio.ensure_future(searches.decide(1, wanted=False))
    third = asyncio.ensure_future(searches.decide(2, wanted=True))
    searches.skip(0)  # the first hop's retrieval raised
    assert await asyncio.gather(second, third) == [False, True]
