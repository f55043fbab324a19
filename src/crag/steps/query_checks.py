"""Sanity checks on a query a model wrote: a web search query, a follow-up made standalone, a
sub-question. One that fails is rejected (`QueryRejected`) and the offline rule takes over.

Real small models turned "What battery does it use?" into a copy of the previous answer, and
crag searched for that (issue 31). A query is rejected when it is:

- empty;
- far longer than what it stands for (more than `LONGER` times the question and the
  conversation's last question, plus `SLACK` characters): an answer or a ramble, not a query;
- a copy of a previous answer (four or more of its words in a row, found in one);
- an echo of the prompt's instructions (most of its content words from the prompt, none of
  them from the question);
- about something else: it shares no content word (stemmed) with the question and its
  conversation (or, for a bridge question, the facts it was written from).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from crag.errors import QueryRejected
from crag.text import terms, words

LONGER = 3  # times the question's length
SLACK = 80  # characters beyond that, for names a short follow-up only points at
_COPIED_WORDS = 4  # words in a row that make a copy, not a shared phrase


def check_generated(
    query: str,
    *,
    question: str,
    context: Iterable[str] = (),
    answers: Iterable[str] = (),
    instructions: str = "",
    what: str = "query",
) -> str:
    """`query` stripped of whitespace runs, or `QueryRejected` saying which check it failed.

    Args:
        query: what the model wrote.
        question: the question it stands for.
        context: other text it may take its words from (the conversation's questions, facts).
        answers: previous answers it must not copy.
        instructions: the prompt's own text (without the question), which it must not echo.
        what: what it is, for the message ("rewrite", "follow-up", "sub-question").
    """
    text = " ".join(query.split())
    if not text:
        raise QueryRejected(f"the model's {what} is empty")
    sources = [question, *context]
    room = LONGER * max(len(s) for s in sources) + SLACK
    if len(text) > room:
        raise QueryRejected(f"the model's {what} is {len(text)} characters long, for a {len(question)}-character question")
    mine = words(text)
    for answer in answers:
        if _copied(mine, words(answer)):
            raise QueryRejected(f"the model's {what} copies a previous answer: {text[:60]!r}")
    own = set(terms(text))
    known = {t for s in sources for t in terms(s)}
    if instructions:
        echoed = own & set(terms(instructions)) - known
        if own and not own & known and len(echoed) * 2 >= len(own):
            raise QueryRejected(f"the model's {what} echoes the prompt: {text[:60]!r}")
    if own and not own & known:
        raise QueryRejected(f"the model's {what} shares no word with the question: {text[:60]!r}")
    return text


def _copied(mine: list[str], answer: list[str]) -> bool:
    """True when `_COPIED_WORDS` of `mine` in a row appear in `answer` in a row (all of `mine`
    when it is shorter), and most of `mine` is in it: a copy, not a name both mention."""
    if not mine or not answer:
        return False
    n = min(_COPIED_WORDS, len(mine))
    grams = {tuple(answer[i : i + n]) for i in range(len(answer) - n + 1)}
    runs = sum(tuple(mine[i : i + n]) in grams for i in range(len(mine) - n + 1))
    return runs > 0 and sum(w in set(answer) for w in mine) * 4 >= len(mine) * 3


def instructions_of(template: str) -> str:
    """A prompt template's own words, its {fields} left out."""
    return re.sub(r"\{\w+\}", " ", template)
