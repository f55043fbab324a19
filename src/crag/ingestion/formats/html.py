"""HTML and XHTML to plain text with the standard library's `HTMLParser`, as a browser shows
it: block elements become paragraph breaks, a run of whitespace in text one space (inside
`<pre>` and `<textarea>` the text is kept as written); scripts and styles are left out.

Collapsing matters for pages as they are written: a Standard Ebooks chapter indents its markup
with tabs, and one EPUB dictionary read as 447,000 characters of which 90,000 were that
indentation, cutting every entry's headword from its definition by a block of tabs.

A definition list's term leads its definition in one paragraph, "Cynic: A blackguard whose
faulty vision...", as a glossary is read: apart, the sentence that defines a word never names
it, and a question about the word finds every other sentence that mentions it first.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_SPACES = re.compile(r"\s+")


class _TextExtractor(HTMLParser):
    _SKIP = frozenset({"script", "style", "noscript", "template"})
    _BLOCK = frozenset({"p", "div", "br", "li", "tr", "section", "article", "dl", "dt", "dd", "blockquote",
                        "pre", "header", "footer", "main", "nav", "aside", "figure", "figcaption",
                        "table", "caption", "hr", "address", "hgroup", "details", "summary",
                        *_HEADINGS})
    _CELL = frozenset({"td", "th"})  # a space apart: "<td>a</td><td>b</td>" is "a b", not "ab"
    _KEEP = frozenset({"pre", "textarea"})  # whitespace as written
    # What may open between a term and its definition's first words without parting them.
    _DEFINITION = frozenset({"dd", "p", "div", "span", "i", "b", "em", "strong", "dfn", "abbr", "a"})

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[tuple[str, bool] | None] = []  # (text, kept as written); None: a break
        self.title = ""
        self.heading = ""  # the first heading's text
        self._skipping = 0
        self._keeping = 0
        self._in_title = False
        self._in_heading = False
        self._after_term = False  # a <dt> ended: its <dd>'s text joins it after ": "

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag == "title":
            self._in_title = True
        elif tag in self._CELL:
            self.parts.append((" ", False))
        if tag in self._KEEP:
            self._keeping += 1
        if self._after_term and (tag == "dt" or tag not in self._DEFINITION):
            self._after_term = False  # another term, or what follows the list: the term stands alone
            self.parts.append(None)
        if tag in self._BLOCK and not self._after_term:
            self.parts.append(None)
            if tag in _HEADINGS and not self.heading.strip():
                self._in_heading = True

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skipping = max(0, self._skipping - 1)
        elif tag == "title":
            self._in_title = False
        if tag in self._KEEP:
            self._keeping = max(0, self._keeping - 1)
        if tag == "dt":
            self._after_term = True
        elif tag in self._BLOCK:
            self._after_term = False  # a definition without words, or the list's end
            self.parts.append(None)
            if tag in _HEADINGS:
                self._in_heading = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping:
            kept = self._keeping > 0
            if self._after_term:
                if not data.strip():
                    return
                self._after_term = False
                self._join_term()
                data = data.lstrip()
            self.parts.append((data if kept else _SPACES.sub(" ", data), kept))
            if self._in_heading:
                self.heading += data

    def _join_term(self) -> None:
        """End the term just read with ": " (its definition follows), whatever spaces its markup left."""
        while self.parts and self.parts[-1] is not None and not self.parts[-1][0].strip():
            self.parts.pop()
        if self.parts and self.parts[-1] is not None:
            term = self.parts[-1][0].rstrip()
            self.parts[-1] = (term, self.parts[-1][1])
            self.parts.append((" " if term.endswith(":") else ": ", False))

    def text(self) -> str:
        """The paragraphs, one blank line apart; spaces at a paragraph's ends dropped, unless
        the paragraph holds text kept as written."""
        paragraphs: list[str] = []
        current: list[tuple[str, bool]] = []
        for part in [*self.parts, None]:
            if part is not None:
                current.append(part)
                continue
            paragraph = "".join(text for text, _ in current)
            if not any(kept for _, kept in current):
                paragraph = paragraph.strip(" ")
            if paragraph.strip():
                paragraphs.append(paragraph)
            current = []
        return "\n\n".join(paragraphs)


def html_text(html: str) -> tuple[str, str, str]:
    """(the `<title>`, the text, the first heading) of an HTML or XHTML page."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    return parser.title.strip(), parser.text(), " ".join(parser.heading.split())
