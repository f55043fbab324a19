"""Running headers and footers: the lines a PDF repeats at the top or bottom of its pages.

Left in, they are glued into the sentences around them ("10 Row and Column Access Control
Support in IBM DB2 for i 2.1.6 Change Function Usage…"), in chunks and in answers. A line is
one when, its page numbers ignored ("Page 3 of 9", "iii"), it is the first or last line of
most pages; or when it carries a page number that changes from page to page and stands at the
edge of three pages or more. The second catches a book's headers, which alternate: the title
on the left-hand pages, the chapter on the right-hand ones, neither on most pages.
"""

from __future__ import annotations

import re
from collections import defaultdict

_EDGE_LINES = 2  # the first two and last two lines of a page: a header, then a page number
_MIN_PAGES = 3
# A page number: digits anywhere; a roman numeral only as a line's first or last word ("xi").
_WORD = re.compile(r"[^\W\d_]{2,}")
_NUMBER = re.compile(r"\d+|^[ivxlc]+\b|\b[ivxlc]+$", re.IGNORECASE)


def drop_running_lines(pages: list[str]) -> list[str]:
    """The pages without their running headers and footers (the module's docstring).

    A page left with nothing but such lines keeps them: there they are its text, not its
    header. A 4-page PDF repeating one line, and 6 image pages each captioned "Background",
    had all their text dropped, and were ingested as files with no chunks.
    """
    if len(pages) < _MIN_PAGES:
        return pages
    found: defaultdict[str, set[str]] = defaultdict(set)  # a line's key: the pages' own lines
    pages_with: defaultdict[str, int] = defaultdict(int)
    for text in pages:
        lines = {line: _key(line) for line in _edges(text)}
        for key in set(lines.values()):
            pages_with[key] += 1
        for line, key in lines.items():
            found[key].add(line)
    running = {key for key, n in pages_with.items()
               if n > len(pages) / 2 or (n >= _MIN_PAGES and _numbered(key) and len(found[key]) >= n)}
    if not running:
        return pages
    return [kept if kept.strip() else text for text in pages for kept in [_without(text, running)]]


def _key(line: str) -> str:
    return _NUMBER.sub("#", line)


def _numbered(key: str) -> bool:
    """Whether a line's key has a page number at one end and two words or more besides
    ("# Row and Column …"); "Chapter #" opening three chapters is a heading, not a header."""
    return (key.startswith("#") or key.endswith("#")) and len(_WORD.findall(key)) >= 2


def _edges(text: str) -> list[str]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[:_EDGE_LINES] + lines[-_EDGE_LINES:]


def _without(text: str, running: set[str]) -> str:
    lines = text.splitlines()
    filled = [i for i, line in enumerate(lines) if line.strip()]
    edge = set(filled[:_EDGE_LINES] + filled[-_EDGE_LINES:])
    return "\n".join(line for i, line in enumerate(lines) if i not in edge or _key(line.strip()) not in running)
