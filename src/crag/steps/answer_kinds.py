"""What kind of answer a question asks for, and whether a sentence holds one: the cue an
extractive answer uses to open with the sentence that answers rather than one that only
restates the question."""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal["date", "number", "name"]

# Checked in this order: "who ... in what year" asks for a year, "how many ... where" a number.
_ASKS: tuple[tuple[Kind, re.Pattern[str]], ...] = (
    ("date", re.compile(r"\b(?:when|(?:what|which) (?:year|date|decade|century|month|day))\b", re.IGNORECASE)),
    ("number", re.compile(r"\bhow (?:many|much|long|old|far|large|big|tall|high|deep|wide)\b", re.IGNORECASE)),
    ("name", re.compile(r"\b(?:who|whom|whose|where)\b|\b(?:what|which) (?:city|country|town|state|county|region"
                        r"|nation|village|river|island|province|place|team|company|band|university|person)\b",
                        re.IGNORECASE)),
)
_WORD = re.compile(r"[^\W_]+(?:['’.-][^\W_]+)*")
_YEAR = re.compile(r"^(?:1\d{3}|20\d{2})s?$")
_MONTHS = frozenset({"january", "february", "march", "april", "may", "june", "july", "august", "september",
                     "october", "november", "december"})
_NUMBER_WORDS = frozenset({"two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
                           "twenty", "thirty", "forty", "fifty", "hundred", "thousand", "million", "billion", "dozen"})


def asked_kind(question: str) -> Kind | None:
    """The kind of answer `question` asks for from its wh-word ("when" a date, "how many" a
    number, "who" or "where" a name); None when it does not say ("what did ... define?")."""
    return next((kind for kind, asks in _ASKS if asks.search(question)), None)


def holds_kind(sentence: str, kind: Kind, question: str) -> bool:
    """Whether `sentence` names something of `kind` that `question` does not: a year or month,
    a number, or a capitalised name (its opening word aside, capitalised in any sentence). What
    the question already says is no answer to it."""
    asked = {w.casefold() for w in _WORD.findall(question)}
    said = _WORD.findall(sentence)
    if kind == "name":
        return any(w[0].isupper() and w.casefold() not in asked for w in said[1:])
    new = [w.casefold() for w in said if w.casefold() not in asked]
    if kind == "date":
        return any(_YEAR.match(w) or w in _MONTHS for w in new)
    return any(any(c.isdigit() for c in w) or w in _NUMBER_WORDS for w in new)
