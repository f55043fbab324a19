"""HTML and XHTML to plain text with the standard library's `HTMLParser`, as a browser shows
it: block elements become paragraph breaks, a run of whitespace in text one space (inside
`<pre>` and `<textarea>` the text is kept as written); scripts and styles are left out.

Collapsing matters for pages as they are written: a Standard Ebooks chapter indents its markup
with tabs, and one EPUB dictionary read as 447,000 characters of which 90,000 were that
indentation, cutting every entry's headword from its definition by a block of tabs.

A definition list's term leads its definition in one paragraph, "Cynic: A blackguard whose
faulty vision...", as a glossary is read: apart, the sentence that defines a word never names
it, and a question about the word finds every other sentence that mentions it first.

A table is one paragraph per row, its cells between bars ("Mallard | Ponds | Quack"), as a Word
table is kept: a row is a record whose cells an answer can name by their header. A cell that
spans rows or columns is written in each place it covers, so every row has all its cells ("2025 |
Q1 | March | $160"). An ordered list's items keep their numbers ("2. Open the valve"): people ask
about step 2. An image's `alt` text is read where the image stands, as a browser without images shows it.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from crag.ingestion.formats.grid import Cell, spread
from crag.ingestion.formats.numbering import counter_text

_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_SPACES = re.compile(r"\s+")
_SPAN_LIMIT = 1000  # HTML's own limit on colspan; a rowspan is bounded by the rows there are
_LIST_TYPES = {"a": "lowerLetter", "A": "upperLetter", "i": "lowerRoman", "I": "upperRoman"}  # <ol type>


class _Table:
    """A table being read: its rows of cells."""

    def __init__(self) -> None:
        self.rows: list[list[Cell]] = []
        self.row: list[Cell] | None = None
        self.cell: tuple[int, int, int] | None = None  # (where its text starts in `parts`, colspan, rowspan)


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
        self._tables: list[_Table] = []
        self._lists: list[list] = []  # per open list: [the next item's number or None (unordered), type]

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag == "title":
            self._in_title = True
        elif tag == "table":
            self._tables.append(_Table())
        elif tag == "tr" and self._tables:
            self._end_row()
            self._tables[-1].row = []
        elif tag in self._CELL and self._tables:
            self._end_cell()
            spans = dict(attrs)
            self._tables[-1].cell = (len(self.parts), _span(spans.get("colspan")), _span(spans.get("rowspan")))
        elif tag in self._CELL:  # a cell outside any table: a space apart, "a b" not "ab"
            self.parts.append((" ", False))
        elif tag in ("ol", "ul", "menu"):
            ordered = dict(attrs) if tag == "ol" else None
            self._lists.append([None] if ordered is None else [_number(ordered.get("start"), 1), ordered.get("type")])
        elif tag == "img" and not self._skipping:
            alt = _SPACES.sub(" ", dict(attrs).get("alt") or "").strip()
            if alt:
                self.parts.append((f"{self._space_before()}{alt} ", False))
        if tag in self._KEEP:
            self._keeping += 1
        if self._after_term and (tag == "dt" or tag not in self._DEFINITION):
            self._after_term = False  # another term, or what follows the list: the term stands alone
            self.parts.append(None)
        if tag in self._BLOCK and not self._after_term:
            self.parts.append(None)
            if tag in _HEADINGS and not self.heading.strip():
                self._in_heading = True
        if tag == "li" and self._lists and self._lists[-1][0] is not None:
            number = _number(dict(attrs).get("value"), self._lists[-1][0])
            self._lists[-1][0] = number + 1
            self.parts.append((f"{_item_label(number, self._lists[-1][1])}. ", False))

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skipping = max(0, self._skipping - 1)
        elif tag == "title":
            self._in_title = False
        if tag in self._KEEP:
            self._keeping = max(0, self._keeping - 1)
        if tag in self._CELL and self._tables:
            self._end_cell()
        elif tag == "tr" and self._tables:
            self._end_row()
        elif tag == "table" and self._tables:
            self._end_table()
        elif tag in ("ol", "ul", "menu") and self._lists:
            self._lists.pop()
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
            if not kept:
                data = _SPACES.sub(" ", data)
                if data.startswith(" ") and not self._space_before():  # one space between words, as a browser shows
                    data = data[1:]
            self.parts.append((data, kept))
            if self._in_heading:
                self.heading += data

    def _space_before(self) -> str:
        """" " where the text read last ends in a word, "" where it ends in a space or a break."""
        last = self.parts[-1] if self.parts else None
        return " " if last is not None and last[0] and not last[0][-1].isspace() else ""

    def _end_cell(self) -> None:
        """Take the open cell's text out of `parts` into its row, as one line."""
        table = self._tables[-1]
        if table.cell is None:
            return
        start, columns, rows = table.cell
        text = " ".join("".join(" " if part is None else part[0] for part in self.parts[start:]).split())
        del self.parts[start:]
        if table.row is None:  # a cell outside any <tr>: a row of its own begins
            table.row = []
        table.row.append((text, columns, rows))
        table.cell = None

    def _end_row(self) -> None:
        self._end_cell()
        table = self._tables[-1]
        if table.row:
            table.rows.append(table.row)
        table.row = None

    def _end_table(self) -> None:
        """Write the table just read: a row a paragraph, its cells between bars; inside another
        table's cell, its cells one after another (that cell is one line of its row)."""
        self._end_row()
        grid = spread(self._tables.pop().rows)
        nested = bool(self._tables) and self._tables[-1].cell is not None
        self.parts.append(None)
        for row in grid:
            self.parts.append(((" " if nested else " | ").join(row) + " ", False))
            self.parts.append(None)

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


def _span(value: str | None) -> int:
    """A colspan's or rowspan's count, 1 where it is missing, not a number, or 0 ("to the end")."""
    return min(max(_number(value, 1), 1), _SPAN_LIMIT)


def _number(value: str | None, default: int) -> int:
    try:
        return int((value or "").strip())
    except ValueError:
        return default


def _item_label(number: int, kind: str | None) -> str:
    """An ordered list item's number as its list's `type` writes it: 1, a, A, i or I."""
    return counter_text(number, _LIST_TYPES.get(kind or "1", "decimal"))


def html_text(html: str) -> tuple[str, str, str]:
    """(the `<title>`, the text, the first heading) of an HTML or XHTML page."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    return parser.title.strip(), parser.text(), " ".join(parser.heading.split())
