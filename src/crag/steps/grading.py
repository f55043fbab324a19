"""Relevance graders and the verdict policy of the CRAG paper."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from functools import lru_cache

from llama_index.core.llms import LLM, ChatMessage
from llama_index.core.schema import NodeWithScore

from crag import text
from crag._offload import off_loop, warm_up
from crag.errors import GradeParseError
from crag.events import Grade, Verdict
from crag.interfaces import Grader
from crag.prompts import GRADE_PROMPT
from crag.text import SPANS_KEY, TermStats, sentences, terms, weighted_coverage


def decide_verdict(
    grades: Sequence[Grade], upper: float, lower: float, *, coverage: float | None = None, cover: float = 0.0
) -> Verdict:
    """Correct if some chunk scores >= upper and the kept chunks together cover the question
    (`coverage` >= `cover`, when a coverage is given); Incorrect if all score < lower; else
    Ambiguous.

    A binary yes/no grader is the case `upper == lower`: any "yes" is Correct, else Incorrect.
    """
    best = max((g.score for g in grades), default=0.0)
    if best >= upper and (coverage is None or coverage >= cover):
        return Verdict.CORRECT
    if best < lower:
        return Verdict.INCORRECT
    return Verdict.AMBIGUOUS


def explain_verdict(
    grades: Sequence[Grade], upper: float, lower: float, *, coverage: float | None = None, cover: float = 0.0
) -> str:
    """`decide_verdict`'s rule as it applied to these grades, in one sentence."""
    verdict = decide_verdict(grades, upper, lower, coverage=coverage, cover=cover)
    if not grades:
        return f"Incorrect: nothing was retrieved, so no grade could reach the lower threshold {lower:g}."
    best = max(g.score for g in grades)
    n = len(grades)
    if verdict is Verdict.CORRECT:
        return f"Correct: the best of {n} grades, {best:.2f}, reached the upper threshold {upper:g}."
    if best >= upper and coverage is not None:
        return (f"Ambiguous: the best of {n} grades, {best:.2f}, reached the upper threshold {upper:g}, "
                f"but the kept chunks together cover only {coverage:.2f} of the question, below {cover:g}.")
    if verdict is Verdict.INCORRECT:
        return (f"Incorrect: all {n} grades were below the lower threshold {lower:g} "
                f"(the best was {best:.2f}).")
    passed = sum(g.score >= lower for g in grades)
    return (f"Ambiguous: the best of {n} grades, {best:.2f}, is between the lower threshold {lower:g} "
            f"and the upper {upper:g}; {passed} chunk{'s' * (passed != 1)} passed the lower one.")


class LexicalEvaluator:
    """Offline relevance evaluator: no LLM, an absolute score in [0, 1] per chunk.

    The score blends three coverages of the question's content terms, IDF-weighted:
    of the whole chunk (0.4), of its best two-sentence window (0.4), since an answer
    usually sits in one place that repeats most of the question's rare terms, and of the
    question's consecutive term pairs (0.2), which rewards phrases over scattered words.
    The document title counts as part of the text: it names the entity a passage is
    about. A question term missing from the text but related to a text term by prefix
    ("revolutionary" / "revolution", "rider" / "ride": the stemmer keeps derivations
    apart) counts `partial` of its weight. When the question names the chunk's document, by
    every word of its title, one of them rare in the corpus ("Park Holme, South Australia",
    not "Normans" in a history of the Normans), the score closes `named` of its gap to 1:
    the passage is about the very thing asked of, even where the question's other half
    lies in another passage (a multi-hop question). Chunks are never compared with each
    other, so when none is about the question every score stays low.

    On the top-5 chunks of the shared dev sets, with half the gold passages removed from
    the index, ROC AUC against "is the gold passage": squad 0.916, popqa 0.998, hotpotqa
    0.891 (without the named-document credit: 0.916, 0.998, 0.858; exact terms only: 0.908,
    0.998, 0.848); other candidates were weaker (`python benchmarks/evaluator.py`).

    Args:
        stats: document frequencies of the corpus, for IDF weights.
        window: sentences per window.
        partial: credit for a prefix-related term, as a share of its weight; 0 for exact only.
        min_prefix: the shortest shared prefix that relates two terms.
        named: the share of a chunk's shortfall from 1 that the question naming its
            document closes; 0 ignores titles beyond their words.
    """

    name = "lexical"

    def __init__(
        self, stats: TermStats, window: int = 2, *, partial: float = 0.8, min_prefix: int = 4,
        named: float = 0.5,
    ) -> None:
        self.stats = stats
        self.window = window
        self.partial = partial
        self.min_prefix = min_prefix
        self.named = named

    def score(
        self, query: str, text: str, title: str | None = None, *, split: bool = True,
        spans: Sequence[int] | None = None, subject: str | None = None,
    ) -> float:
        """Relevance of `text` to `query`; `split=False` treats `text` as one sentence,
        `spans` are its sentences as ingest found them (`crag.text.sentence_spans`), and
        `subject` is its document's title, which the question may name."""
        wanted = _cached_terms(query)
        if not wanted:
            return 0.0
        title_terms = set(_cached_terms(title)) if title else set()
        text_terms = terms(text)
        whole = self._coverage(wanted, set(text_terms) | title_terms)
        if split:
            sents = [set(terms(s)) for s in sentences(text, spans)] or [set()]
            windows = [set().union(*sents[i : i + self.window]) | title_terms for i in range(len(sents))]
            best = max(self._coverage(wanted, w) for w in windows)
        else:  # one sentence is its own only window
            best = whole
        pairs = set(zip(wanted, wanted[1:]))
        phrase = len(pairs & set(zip(text_terms, text_terms[1:]))) / len(pairs) if pairs else whole
        score = 0.4 * whole + 0.4 * best + 0.2 * phrase
        if subject and self.names_document(query, subject):
            score += self.named * (1.0 - score)
        return round(score, 4)

    def names_document(self, query: str, title: str) -> bool:
        """Whether `query` names the document titled `title`: every word of the title, one of
        them rare. A qualifier counts too: it tells namesakes apart, "Rogers Pass (Montana)"
        from "Rogers Pass (British Columbia)" (without it, hotpotqa lost answers to namesakes)."""
        named = set(_cached_terms(title))
        return bool(named) and named <= set(_cached_terms(query)) and self.stats.has_rare(named)

    def coverage(self, query: str, texts: Sequence[tuple[str, str | None]]) -> float:
        """How much of the question the (text, title) pairs cover together, in [0, 1]: the
        IDF-weighted share of its content terms found in their union. A question whose parts
        sit in two passages is covered only when both are there."""
        wanted = _cached_terms(query)
        if not wanted:
            return 0.0
        union: set[str] = set()
        for body, title in texts:
            union.update(terms(body))
            union.update(_cached_terms(title) if title else ())
        return round(self._coverage(list(wanted), union), 4)

    def _coverage(self, wanted: list[str], text_terms: set[str]) -> float:
        return weighted_coverage(wanted, text_terms, self.stats, partial=self.partial, min_prefix=self.min_prefix)

    def warm_up(self) -> None:
        """Load the sentence splitter and stemmer (the term statistics came built)."""
        text.warm_up()

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        return await off_loop(self.grade_sync, query, chunks)

    def grade_sync(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        """`grade` without the event loop: for callers already off it (the reranker)."""
        return [
            Grade(
                chunk_id=c.node.node_id,
                score=self.score(query, c.node.get_content(), context_of(c.node.metadata),
                                 spans=c.node.metadata.get(SPANS_KEY), subject=c.node.metadata.get("title")),
                grader=self.name,
            )
            for c in chunks
        ]


_NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)(?:\s*/\s*10)?(?!\.?\d)")


def parse_grade(reply: str) -> float:
    """Read a 0-10 rating (or yes/no) from a model's reply; raise GradeParseError otherwise.

    A decimal strictly between 0 and 1 ("0.8") is read as the probability the model
    meant, not as 0.08 on the prompt's scale.
    """
    text = reply.strip().lower()
    match = _NUMBER.search(text)
    if match:
        number = match.group(1)
        value = float(number)
        if "." in number and 0.0 < value < 1.0 and "/" not in match.group(0):
            return value
        if 0.0 <= value <= 10.0:
            return value / 10.0
        raise GradeParseError(f"grade {number} is outside 0-10 in reply {reply[:80]!r}")
    first = re.findall(r"[a-z]+", text)[:3]
    if "yes" in first or "relevant" in first[:1]:
        return 1.0
    if "no" in first or "irrelevant" in first[:1]:
        return 0.0
    raise GradeParseError(f"no 0-10 rating or yes/no in reply {reply[:80]!r}")


class LLMGrader:
    """Grades every chunk with a chat model, all chunks concurrently (bounded).

    An unparseable reply or a failed call falls back to `fallback` for that chunk,
    and the grade's `note` says so.
    """

    name = "llm"

    def __init__(self, llm: LLM, fallback: Grader, *, concurrency: int = 32, max_chars: int = 4000) -> None:
        self.llm = llm
        self.fallback = fallback
        self.concurrency = concurrency
        self.max_chars = max_chars

    def warm_up(self) -> None:
        """Load the fallback's models (the chat model connects on its first call)."""
        warm_up(self.fallback)

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        limit = asyncio.Semaphore(self.concurrency)

        async def one(chunk: NodeWithScore) -> Grade:
            prompt = GRADE_PROMPT.format(query=query, document=chunk.node.get_content()[: self.max_chars])
            try:
                async with limit:
                    reply = await self.llm.achat([ChatMessage(role="user", content=prompt)])
                score = parse_grade(reply.message.content or "")
                return Grade(chunk_id=chunk.node.node_id, score=score, grader=self.name)
            except Exception as exc:  # noqa: BLE001 - any model failure degrades to the fallback
                (fallback,) = await self.fallback.grade(query, [chunk])
                reason = str(exc) if isinstance(exc, GradeParseError) else type(exc).__name__
                return fallback.model_copy(update={"note": f"LLM grade unusable ({reason}); used {fallback.grader}"})

        return list(await asyncio.gather(*(one(c) for c in chunks)))


@lru_cache(maxsize=4096)
def _cached_terms(text: str) -> tuple[str, ...]:
    """`terms` of a query or title, which every strip of a run scores against again."""
    return tuple(terms(text))


def context_of(metadata: dict) -> str | None:
    """What names a chunk's subject besides its text: the title, and a Markdown section's headings."""
    parts = [metadata.get("title"), metadata.get("section")]
    return " ".join(p for p in parts if p) or None
