"""Component changes the evaluation led to: prefix credit in the evaluator, and a synthesizer
and refiner that do not waste or lose the answer sentence."""

from __future__ import annotations

import pytest
from llama_index.core.schema import NodeWithScore, TextNode
from support.paths import SHARED_DATA

from crag import Settings
from crag.evaluation.calibrate import calibrate
from crag.events import Strip
from crag.steps.grading import LexicalEvaluator
from crag.steps.grading.learned import shipped_model
from crag.steps.refining import StripRefiner
from crag.steps.synthesis import ExtractiveSynthesizer
from crag.text import TermStats, related_by_prefix, terms, weighted_coverage

CORPUS = [
    "Paul Revere was descended from Huguenot refugees, as were other leaders of the American Revolution.",
    "The Huguenots were French Protestants who followed the teachings of John Calvin.",
    "Many Huguenot families settled in South Africa, where they founded the wine industry.",
    "The Yuan dynasty was founded by Kublai Khan in 1271.",
]
QUESTION = "What Revolutionary War rider was a Huguenot descendant?"


def test_terms_related_by_a_prefix_are_matched_in_part() -> None:
    # The stemmer keeps these apart: "revolutionari" / "revolut", "rider" / "ride".
    assert terms("revolutionary rider") == ["revolutionari", "rider"]
    assert related_by_prefix("revolutionari", {"revolut"}) and related_by_prefix("ride", {"rider"})
    assert not related_by_prefix("war", {"warsaw"})  # too short to relate
    stats = TermStats.from_texts(CORPUS)
    exact = weighted_coverage(["revolutionari", "huguenot"], {"revolut", "huguenot"}, stats)
    partial = weighted_coverage(
        ["revolutionari", "huguenot"], {"revolut", "huguenot"}, stats, partial=0.8
    )
    assert exact < partial < 1.0


def test_prefix_credit_lifts_a_paraphrased_gold_passage_and_nothing_else() -> None:
    stats = TermStats.from_texts(CORPUS)
    before = [LexicalEvaluator(stats, partial=0.0).score(QUESTION, text) for text in CORPUS]
    after = [LexicalEvaluator(stats).score(QUESTION, text) for text in CORPUS]
    assert after[0] > before[0] + 0.1  # "Revolution", "descended" now count in part
    assert after[1:] == before[1:]  # passages without related terms score as before
    assert after[0] > 2 * max(after[1:])


def strip(text: str, score: float, source: str, kind: str = "internal") -> Strip:
    return Strip(text=text, source_id=source, kind=kind, score=score, doc_id=source)


async def test_a_sentence_found_twice_is_used_once() -> None:
    strips = [
        strip("Paul Revere was descended from Huguenots.", 0.9, "doc1"),
        strip("Paul Revere was descended from Huguenots.", 0.9, "web:doc1", kind="web"),
        strip("Revere rode at midnight.", 0.7, "doc1"),
        strip("Huguenots settled in South Carolina.", 0.5, "doc2"),
    ]
    answer, sources = await ExtractiveSynthesizer(max_sentences=3).synthesize(QUESTION, strips)
    assert answer.count("Paul Revere was descended") == 1
    assert "South Carolina" in answer  # the repeat did not take the third place
    assert [s.id for s in sources] == ["doc1", "doc2"]  # the first source of the repeat is cited


async def test_a_refiner_without_a_cap_keeps_every_sentence_above_the_floor() -> None:
    stats = TermStats.from_texts(CORPUS)
    chunks = [
        NodeWithScore(node=TextNode(id_=f"c{i}", text=t), score=1.0) for i, t in enumerate(CORPUS)
    ]
    everything = await StripRefiner(LexicalEvaluator(stats), max_strips=None, min_score=0.0).refine(
        QUESTION, chunks
    )
    assert [s.text for s in everything] == CORPUS  # one sentence each, in source order
    capped = await StripRefiner(LexicalEvaluator(stats), max_strips=2, min_score=0.0).refine(
        QUESTION, chunks
    )
    assert len(capped) == 2


async def test_at_an_equal_score_the_sentence_that_defines_the_asked_word_comes_first() -> None:
    """A glossary's "Cynic: ..." before a passing mention in an earlier passage; a copula does not
    count, so an article's later "Marles was made..." stays behind its first sentence."""
    def chunks(*texts: str) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(id_=f"c{i}", text=t), score=1.0) for i, t in enumerate(texts)]

    stats = TermStats.from_texts(["a cynic", "Marles", "the preface", "politics"])
    refiner = StripRefiner(LexicalEvaluator(stats), max_strips=None, min_score=0.0)
    mention, definition = "Among them, they brought the word cynic into disfavor.", "Cynic: A blackguard whose faulty vision."
    strips = await refiner.refine("What is a cynic?", chunks(mention, definition))
    assert strips[0].score == strips[1].score and [s.defines for s in strips] == [False, True]
    answer, _ = await ExtractiveSynthesizer().synthesize("What is a cynic?", strips)
    assert answer.startswith(definition)

    first, later = "Richard Donald Marles (born 1967) is an Australian politician.", "Marles was made a secretary in 2009."
    strips = await refiner.refine("What is Marles's occupation?", chunks(first, later))
    assert strips[0].score == strips[1].score and not any(s.defines for s in strips)
    answer, _ = await ExtractiveSynthesizer().synthesize("What is Marles's occupation?", strips)
    assert answer.startswith(first)


@pytest.mark.slow
@pytest.mark.skipif(
    not (SHARED_DATA / "squad-dev.jsonl").exists(),
    reason="shared data not checked out beside the repo",
)
def test_crag_calibrate_on_the_dev_sets_fits_the_offline_evaluators_shipped_upper() -> None:
    """`crag calibrate` (one gold drop, seed 0) agrees with the `upper` that `python -m
    crag.evaluation.fit` shipped with the weights (five drops, seeds 0-4); `lower`, fitted to
    keep 98% of the gold chunks, moves with the drop (0.107 here, 0.082 shipped)."""
    sets = [
        (SHARED_DATA / f"{n}-dev.jsonl", SHARED_DATA / f"{n}-dev-corpus.jsonl")
        for n in ("squad", "popqa", "hotpotqa")
    ]
    fitted = calibrate(sets, Settings.load(env={}))  # --label gold, best accuracy, --lower-recall 0.98
    assert fitted.upper == shipped_model().upper and fitted.lower >= shipped_model().lower
