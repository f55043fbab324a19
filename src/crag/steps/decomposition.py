"""Decomposers: a compound question into the sub-questions (hops) that each one passage answers.

Two shapes of multi-hop question (as in HotpotQA):

* a comparison names two things, "Which magazine started first, X or Y?", "Are X and Y
  both keyboardists?": one sub-question per thing (`split`);
* a bridge describes a thing by another, "Where is the director of Z based?": the first
  hop finds the director's name, and the second asks about that name (`follow_up`, by a
  model; offline, `crag.steps.bridging` finds it from what the first hop found).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from llama_index.core.llms import LLM

from crag.errors import DecomposeParseError, QueryRejected, ReplyCutOff
from crag.events import Strip
from crag.models.replies import ask
from crag.prompts import FOLLOW_UP_PROMPT, SPLIT_PROMPT
from crag.steps.query_checks import check_generated
from crag.text import STOPWORDS, terms, words

# A name: capitalised words (or a quoted title), joined by the short lower-case words
# names contain ("Battle of the Bulge", "First for Women", "Arcade Fire").
_WORD = r"(?:[A-Z][\w'’.&\-]*|\"[^\"]{1,80}\"|“[^”]{1,80}”)"
_JOINER = r"(?:of|the|for|de|du|la|le|von|van|der|del|da|&)"
_NAME = rf"{_WORD}(?:\s+(?:{_JOINER}\s+)*(?:{_WORD}|\d+\b))*"  # "Apollo 11", not "1995"
_PAIR = re.compile(rf"(?:\bthe\s+)?(?P<a>{_NAME}),?\s+(?:or|and)\s+(?:\bthe\s+)?(?P<b>{_NAME})")
_NAMES = re.compile(_NAME)
# A question that describes a thing rather than naming it: a relative clause after its first
# word ("the director who…", "the magazine of which…"), "this writer", or "the winner of
# the Men's Singles". On the shared dev sets: 61 of 100 HotpotQA questions, every bridge
# that a hop helped among them; 64 of 300 SQuAD and none of 300 PopQA.
_DESCRIBES = re.compile(
    r"^\W*\w+.*?\b(?:who|whom|whose|which|that|where)\b|\b[Tt]h(?:is|ese)\b"
    r"|\bthe\s+\w+(?:\s+\w+)?\s+(?:of|by|in|at|for|from)\s+(?:the\s+)?[A-Z\"“]"
)
# Capitalised only because they start the question, never names.
_QUESTION_WORDS = {
    "who", "what", "which", "when", "where", "why", "how", "whose", "whom", "is", "are", "was",
    "were", "did", "do", "does", "has", "have", "had", "can", "could", "in", "on", "the", "a",
    "an", "this", "that", "these", "those", "he", "she", "it", "they", "his", "her", "its",
    "their", "both", "between", "of", "for", "from", "by", "at", "as", "to", "with",
}


def names_in(text: str) -> list[str]:
    """The names in `text` (capitalised runs and quoted titles), in order, without a leading
    question or function word ("Are Joe Elliott" -> "Joe Elliott")."""
    found = []
    for match in _NAMES.finditer(text):
        parts = match.group(0).split()
        while parts and parts[0].lower().strip("\"“”") in _QUESTION_WORDS:
            parts.pop(0)
        name = " ".join(parts).strip(" ,.;:?!'’")
        if name and any(w not in STOPWORDS for w in words(name)):
            found.append(name)
    return found


def names_a_subject(question: str, *, besides: Sequence[str] = ()) -> Callable[[str | None], bool]:
    """A test of a document's title: does it name one of the things `question` names (and
    the `besides` questions do not: a comparison's part is about its own thing)?

    A hop asks about a named thing, and the passage about that thing is titled with its
    name ("Michael Jackson (writer)" for "Michael Jackson"); a passage that merely mentions
    the name is what the first hop already had. A question naming nothing accepts any title.
    """
    shared = {n for other in besides if other != question for n in names_in(other)}
    wanted = [n for n in (frozenset(terms(name)) for name in names_in(question) if name not in shared) if n]
    if not wanted:
        return lambda title: True
    return lambda title: bool(title) and any(n <= set(terms(title)) for n in wanted)


class RuleDecomposer:
    """Offline decomposition by rules: "X or Y" / "X and Y" comparisons.

    A bridge's next hop offline is found from what the first hop found, not from the question's
    wording (`crag.steps.bridging`), so `follow_up` has none to give.
    """

    name = "rules"

    async def split(self, query: str) -> list[str]:
        return split_comparison(query)

    async def follow_up(self, query: str, found: Sequence[Strip]) -> list[str]:
        return []


def describes_a_thing(query: str) -> bool:
    """True when the question describes what it asks about instead of naming it (a bridge)."""
    return _DESCRIBES.search(query) is not None


def split_comparison(query: str) -> list[str]:
    """One question per named thing of "…, X or Y?" / "Are X and Y both …?"; [] if none.

    Each part is the question with the pair replaced by one of its names, so it keeps what
    is asked ("Who was born earlier, Thomas Wolfe?").
    """
    for match in _PAIR.finditer(query):
        a, b = (names_in(match.group(k)) for k in ("a", "b"))
        if len(a) == 1 and len(b) == 1:
            start = match.start("a") + match.group("a").index(a[0])  # after a leading "Are"
            end = match.start("b") + match.group("b").index(b[0]) + len(b[0])
            head, tail = query[:start], query[end:]
            return [f"{head}{a[0]}{tail}".strip(), f"{head}{b[0]}{tail}".strip()]
    return []


class LLMDecomposer:
    """Asks a chat model for the parts of a comparison and for the bridge's next question.

    The model is asked only about questions the rules flag (two names joined by "or" /
    "and"; a thing described rather than named), so a simple question costs no call. A reply
    that is not what the prompt asked for (not a JSON list of questions, say) raises
    `DecomposeParseError`; the workflow then uses its fallback decomposer and says so.
    """

    name = "llm"

    def __init__(self, llm: LLM, *, max_chars: int = 600, max_tokens: int | None = 160) -> None:
        self.llm = llm
        self.max_chars = max_chars
        self.max_tokens = max_tokens

    async def split(self, query: str) -> list[str]:
        if not split_comparison(query):
            return []
        parts = parse_parts(await self._ask(SPLIT_PROMPT.format(query=query)))
        return [_checked(p, question=query) for p in parts]

    async def follow_up(self, query: str, found: Sequence[Strip]) -> list[str]:
        if not describes_a_thing(query):
            return []
        best = sorted(found, key=lambda s: -s.score)[:4]
        facts = "\n".join(f"- {s.text[: self.max_chars]}" for s in best)
        reply = (await self._ask(FOLLOW_UP_PROMPT.format(query=query, facts=facts or "(none)"))).strip()
        first = next((ln.strip().strip("\"'`") for ln in reply.splitlines() if ln.strip()), "")
        if not first:
            raise DecomposeParseError("the model's follow-up reply was empty")
        if first.upper().rstrip(".") == "NONE":
            return []
        # The next hop is about a thing the facts name, so its words may come from them.
        return [_checked(first, question=query, context=[s.text[: self.max_chars] for s in best])]

    async def _ask(self, prompt: str) -> str:
        try:
            return await ask(self.llm, prompt, max_tokens=self.max_tokens, purpose="decomposition")
        except ReplyCutOff as exc:
            raise DecomposeParseError(str(exc)) from None


def _checked(written: str, **where: object) -> str:
    """A sub-question the model wrote, or DecomposeParseError when it fails the sanity checks."""
    try:
        return check_generated(written, what="sub-question", **where)  # type: ignore[arg-type]
    except QueryRejected as exc:
        raise DecomposeParseError(str(exc)) from None


def parse_parts(reply: str) -> list[str]:
    """A JSON list of sub-questions from a model's reply (a ```json fence allowed); [] means
    the question is simple. Raises DecomposeParseError for anything else."""
    text = reply.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1).strip()
    try:
        parts = json.loads(text)
    except json.JSONDecodeError:
        raise DecomposeParseError(f"expected a JSON list of questions, got {reply[:80]!r}") from None
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        raise DecomposeParseError(f"expected a JSON list of strings, got {reply[:80]!r}")
    parts = [" ".join(p.split()) for p in parts if p.strip()]
    return parts if len(parts) > 1 else []
