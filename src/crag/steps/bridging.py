"""The offline bridge: the second hop of a question that the first hop answered only in part.

A bridge question describes a thing by another ("Where is the band that recorded *Reflektor*
based?"): one passage links what the question names to a thing it does not name ("*Reflektor*
is an album by Arcade Fire"), and a second passage, about that thing, answers ("Arcade Fire is
a band based in Montreal"). No rule about the question's wording decides that a question is
one: what the first hop found does.

* **Answered in part.** The question's content words that the first hop's best strips do not
  hold (their titles included) are the *residual*. With no residual the first hop answered the
  whole question, and there is no second hop.
* **The bridge.** A name that the best strips hold and the question does not: the title of the
  document a best strip comes from, when the question does not name it (the first hop found
  the thing described, not the thing named), then the names in the strips' text, in order.
  A name of common words only ("American"), or a date, names no one thing.
* **The second hop** retrieves with the bridge and the residual (what is asked of the bridge)
  and grades what it finds against the question and the bridge (`Bridge`). A strip that answers
  its bridge (`answers`: about the bridge, and saying something asked of it) leads the answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from crag._offload import off_loop
from crag.events import Bridge, Strip
from crag.steps.decomposition import names_in
from crag.text import STOPWORDS, TermStats, terms, words

# A date is no thing to hop to ("30 November 1836", "May 1882"): month names and numbers only.
_DATE_WORDS = re.compile(
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|\d+(?:st|nd|rd|th|s)?)"
)
_QUALIFIER = re.compile(r"\s*\([^)]*\)")


class LexicalBridgeFinder:
    """Finds the bridge of a question offline, from the first hop's best strips.

    Args:
        stats: the corpus's term statistics: a name made only of words in more than `common`
            of its chunks (and more than five) names many passages, not one. None keeps every name.
        bridges: second hops at most, one per name, in the order found.
        evidence: the first hop's best strips (by score) that are read.
        common: the share of the corpus's chunks above which a word is common.
    """

    name = "lexical"

    def __init__(
        self, stats: TermStats | None = None, *, bridges: int = 2, evidence: int = 2, common: float = 0.01
    ) -> None:
        self.stats = stats
        self.max_bridges = bridges
        self.evidence = evidence
        self.common = common

    async def bridges(self, query: str, found: Sequence[Strip]) -> list[Bridge]:
        return await off_loop(self.find, query, found)  # stemming: never on the loop (DESIGN.md)

    def find(self, query: str, found: Sequence[Strip]) -> list[Bridge]:
        """The bridges of `query` in what the first hop `found`; [] when it answered the whole
        question, or found no name to hop to."""
        best = sorted((s for s in found if not s.hop), key=lambda s: -s.score)[: self.evidence]
        seen = {t for s in best for t in terms(f"{s.title or ''} {s.text}")}
        residual = " ".join(dict.fromkeys(w for w in words(query) if w not in STOPWORDS and set(terms(w)) - seen))
        if not best or not residual:
            return []
        names: dict[str, str | None] = {}
        for strip in best:
            for name in self._names(query, strip):
                names.setdefault(name, strip.title)
        return [
            Bridge(entity=name, found_in=title, residual=residual, query=f"{name} {residual}",
                   graded_against=f"{query} {name}")
            for name, title in list(names.items())[: self.max_bridges]
        ]

    def _names(self, query: str, strip: Strip) -> list[str]:
        """The strip's title, then the names in its text, that could be the bridge."""
        asked = set(terms(query))
        # A title's qualifier is no part of the name: "Reflektor (song)" is named by "Reflektor".
        found = [strip.title] if strip.title and self._thing(_QUALIFIER.sub("", strip.title), asked, query) else []
        for name in names_in(strip.text):
            if " " not in name and strip.text.startswith(name):
                continue  # capitalised as the sentence's first word ("Predictably"), not as a name
            if self._thing(name, asked, query):
                found.append(name)
        return found

    def _thing(self, name: str, asked: set[str], query: str) -> bool:
        """A name of one thing that the question does not already name."""
        named = set(terms(name))
        if not named - asked or name.casefold() in query.casefold():
            return False
        if all(_DATE_WORDS.fullmatch(w) for w in words(name)):
            return False
        return self.stats is None or not self.stats.num_docs or self.stats.has_rare(named, common=self.common)


def answers(bridge: Bridge, strip: Strip) -> bool:
    """Whether `strip` answers what `bridge` asks: it comes from the bridge's own document (every
    word of the bridge's name in its title, or every word of the title, without its qualifier,
    in the name) and holds a word of the residual, and it is not the document the bridge was
    read in: a bridge leads to another document. A hop to a name that was no bridge finds none,
    and its sentence comes after the question's own. (A report's pages share its title: a name
    in that title, read on page 1, led the answer with page 2's sentence about something else.)"""
    if bridge.found_in is not None and strip.title == bridge.found_in:
        return False
    name, title = set(terms(bridge.entity)), set(terms(_QUALIFIER.sub("", strip.title or "")))
    about = bool(title) and (name <= set(terms(strip.title or "")) or title <= name)
    return about and bool(set(terms(bridge.residual)) & set(terms(f"{strip.title or ''} {strip.text}")))
