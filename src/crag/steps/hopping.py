"""A compound question's further hops, after the first pass's knowledge is refined.

    strips ─▶ comparison?  ─▶ each part no strip is about: retrieved, graded, refined, searched
           └▶ follow-ups?  ─▶ each next question (a model's, for a bridge): the same
           └▶ bridges?     ─▶ each name the best strips hold that the question describes:
                              retrieved with what is asked of it, graded against the question
                              and the name, searched on the web when the run's one search is left

Every hop is graded by the run's `GradedRetrieval`, with the run's thresholds, postprocessing
and cache. A hop's failing web search costs that hop its web results only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from llama_index.core.schema import NodeWithScore

from crag._offload import off_loop
from crag.budget import by_deadline
from crag.events import Bridge, Strip, Verdict
from crag.interfaces import BridgeFinder, Decomposer, Refiner, WebSearch, web_configured
from crag.steps.bridging import answers
from crag.steps.decomposition import RuleDecomposer, names_a_subject
from crag.steps.graded_retrieval import GradedRetrieval
from crag.steps.grading import context_of
from crag.trace import StepRecord, describe, or_fallback, substep

__all__ = ["BRIDGE_SEARCHES", "HopPlanner"]

T = TypeVar("T")

BRIDGE_SEARCHES = 1
"""Web searches a run's bridge hops may make together. Each is a paid call with Tavily; with
two bridges each searching, a single-hop question that merely names a word its passage lacks
("occupation") tripled a run's searches (PopQA dev, 0.5 to 1.5 a question)."""


class HopPlanner:
    """Plans and follows a question's further hops; `follow` returns the strips to answer from.

    Args:
        retrieval: retrieves and grades each hop, as the question was.
        refiner: keeps each hop's relevant strips.
        web_search: searched when a hop's documents miss it.
        decomposer: a comparison's parts, and a model's next question for a bridge; None
            plans no parts and no follow-ups.
        bridger: the second hop of a question the first pass answered only in part, when the
            decomposer gives no next question (offline). With neither, `follow` adds nothing.
        fallback_decomposer: stands in when the decomposer fails (default: the rules).
    """

    def __init__(
        self,
        retrieval: GradedRetrieval,
        refiner: Refiner,
        web_search: WebSearch,
        *,
        decomposer: Decomposer | None = None,
        bridger: BridgeFinder | None = None,
        fallback_decomposer: Decomposer | None = None,
    ) -> None:
        self.retrieval = retrieval
        self.refiner = refiner
        self.searcher = web_search
        self.decomposer = decomposer
        self.bridger = bridger
        self.fallback_decomposer = fallback_decomposer or RuleDecomposer()

    @property
    def active(self) -> bool:
        """Whether any hop can be planned (else `follow` would return the strips as they are)."""
        return self.decomposer is not None or self.bridger is not None

    async def follow(self, query: str, verdict: Verdict, strips: list[Strip], record: StepRecord) -> list[Strip]:
        """`strips` and what the further hops found, each new strip marked with its hop's number;
        what each hop did goes to `record.details["hops"]`, each hop's work to a sub-step."""
        parts, follow_ups = await self._plan_or_rules(query, verdict, strips, record) if self.decomposer else ([], [])
        questions = list(enumerate(follow_ups, 1))
        if parts:  # a comparison: each part's best strip gets a place in the answer
            tests = [names_a_subject(p, besides=parts) for p in parts]
            # A part that no strip is about needs its own hop.
            questions = [(n, p) for n, (p, about) in enumerate(zip(parts, tests), 1)
                         if not any(about(s.title) for s in strips)]
            strips = [s.model_copy(update={"hop": next((n for n, about in enumerate(tests, 1) if about(s.title)), 0)})
                      for s in strips]
        elif not follow_ups and self.bridger is not None:
            return strips + await self._bridges(query, strips, record)
        found = await asyncio.gather(*(self._one_hop(q, n, record) for n, q in questions))
        # A hop adds what the first pass did not have: strips of documents it had add nothing.
        had = {s.doc_id or s.source_id for s in strips}
        return strips + [s for hop in found for s in hop if (s.doc_id or s.source_id) not in had]

    async def _plan_or_rules(
        self, query: str, verdict: Verdict, strips: list[Strip], record: StepRecord
    ) -> tuple[list[str], list[str]]:
        """A comparison's parts, or else a bridge's next questions; both [] for a simple question.
        A question describing a thing (a bridge) takes the next hop unless the first pass was
        judged Correct."""
        assert self.decomposer is not None
        decomposer = self.decomposer
        return await or_fallback(
            record, "decomposer", "used the rules",
            lambda: _plan(decomposer, query, verdict, strips),
            lambda: _plan(self.fallback_decomposer, query, verdict, strips),
        )

    async def _bridges(self, query: str, strips: list[Strip], record: StepRecord) -> list[Strip]:
        """Every bridge's hop, at once; the run's bridge searches go to them in their order."""
        assert self.bridger is not None
        bridges = await self.bridger.bridges(query, strips)
        searches = _SearchesInOrder(BRIDGE_SEARCHES, len(bridges))  # a run's further web searches are few
        hops = await asyncio.gather(*(self._bridge_hop(b, record, searches, n) for n, b in enumerate(bridges)))
        # In the order the bridges were found: the best strip's first. A bridge's document may be
        # one the first pass had: its strips are scored again, for what is asked of it.
        record.details.setdefault("hops", []).extend(line for _, line in hops)
        return [s.model_copy(update={"hop": n}) for n, (found, _) in enumerate(hops, 1) for s in found]

    async def _one_hop(self, question: str, number: int, record: StepRecord) -> list[Strip]:
        """One sub-question retrieved and graded as the question was; searched on the web
        when no chunk reaches the upper threshold. Its strips are marked with its number."""
        about = names_a_subject(question)
        with substep(record, f"hop {number}: retrieve"):
            chunks = [c for c in await self.retrieval.find(question) if about(context_of(c.node.metadata))]
        with substep(record, f"hop {number}: grade"):
            graded = await self.retrieval.grade(question, chunks)
        with substep(record, f"hop {number}: refine"):
            incorrect = graded.verdict is Verdict.INCORRECT
            strips = [] if incorrect else await self.refiner.refine(question, graded.kept)
        searched = graded.verdict is not Verdict.CORRECT and web_configured(self.searcher)
        if searched:
            def about_it(results: list[NodeWithScore]) -> list[NodeWithScore]:
                return [r for r in results if about(context_of(r.node.metadata))]

            strips += await self._search(question, record, f"hop {number}: web_search",
                                         then=lambda results: self.refiner.refine(question, about_it(results)))
        record.details.setdefault("hops", []).append(
            {"question": question, "verdict": graded.verdict.value, "searched": searched, "strips": len(strips),
             "found": _titles(strips)}
        )
        return [s.model_copy(update={"hop": number}) for s in strips]

    async def _bridge_hop(
        self, bridge: Bridge, record: StepRecord, searches: _SearchesInOrder, number: int
    ) -> tuple[list[Strip], dict[str, Any]]:
        """The second hop of a bridge (the `number`th, from 0): retrieved with the bridge and what
        is asked of it, graded against the question and the bridge, searched on the web when no
        chunk reaches the upper threshold and the run's hops have a search left (`searches`,
        shared; the web's results graded the same way). Returns its strips and what it did, for
        the trace."""
        name = f"hop to “{bridge.entity}”"
        try:
            with substep(record, f"{name}: retrieve"):
                chunks = await self.retrieval.find(bridge.query)
            with substep(record, f"{name}: grade"):
                graded = await self.retrieval.grade(bridge.graded_against, chunks)
        except BaseException:  # re-raised: a failed or cancelled hop must not hold up the hops after it
            searches.skip(number)
            raise
        verdict = graded.verdict  # the documents' own: the web's results do not change what is told
        searched = await searches.decide(number, verdict is not Verdict.CORRECT and web_configured(self.searcher))
        kept = list(graded.kept)
        if searched:  # the web's results graded against the same question, kept after the documents'
            kept += await self._search(bridge.query, record, f"{name}: web_search",
                                       then=lambda results: self._kept_of(bridge.graded_against, results))
        with substep(record, f"{name}: refine"):
            refined = await self.refiner.refine(bridge.query, kept)
            leads = await off_loop(lambda: [answers(bridge, s) for s in refined])
            strips = [s.model_copy(update={"leads": lead}) for s, lead in zip(refined, leads)]
        line = {
            "question": bridge.query, "bridge": bridge.entity, "found_in": bridge.found_in,
            "graded_against": bridge.graded_against, "verdict": verdict.value, "searched": searched,
            "strips": len(strips), "found": _titles(strips),
            "answering": sum(s.leads for s in strips),
        }
        return strips, line

    async def _kept_of(self, against: str, chunks: list[NodeWithScore]) -> list[NodeWithScore]:
        return (await self.retrieval.grade(against, chunks)).kept

    async def _search(
        self, query: str, record: StepRecord, name: str, *, then: Callable[[list[NodeWithScore]], Awaitable[list[T]]]
    ) -> list[T]:
        """`then` of the web's results for `query`, in one sub-step; [] when either fails: the
        hop says so and goes on without the web."""
        with substep(record, name) as search:
            search.search_calls += 1
            try:
                return await then(await by_deadline(self.searcher.search(query), "the web search"))
            except Exception as exc:  # noqa: BLE001 - a search outage costs this hop only
                search.degraded = record.degraded = f"web search for a hop failed ({describe(exc)})"
                return []


async def _plan(decomposer: Decomposer, query: str, verdict: Verdict, strips: Sequence[Strip]) -> tuple[list[str], list[str]]:
    parts = await decomposer.split(query)
    if parts or verdict is Verdict.CORRECT:
        return parts, []
    return [], await decomposer.follow_up(query, list(strips))


def _titles(strips: Sequence[Strip]) -> list[str]:
    return list(dict.fromkeys(s.title or s.source_id for s in strips))


class _SearchesInOrder:
    """A run's bridge searches, handed to the hops in the bridges' order (the best strip's
    first) whichever hop's grading ends first: the hops run at once, and when the first to be
    graded took the search, the same question got another answer from run to run (18 of 300
    PopQA dev answers differed between two runs). Each hop must `decide` once, or `skip` when
    it fails first, or the hops after it would wait for it."""

    def __init__(self, searches: int, hops: int) -> None:
        self.left = searches
        self._decided = [asyncio.Event() for _ in range(hops)]

    async def decide(self, hop: int, wanted: bool) -> bool:
        """Whether hop `hop` (0-based) searches: when it wants to and a search is left once the
        hops before it have decided."""
        if hop:
            await self._decided[hop - 1].wait()
        granted = wanted and self.left > 0
        self.left -= granted
        self._decided[hop].set()
        return granted

    def skip(self, hop: int) -> None:
        """Hop `hop` will not decide (it failed): the hops after it need not wait."""
        self._decided[hop].set()
