"""HTML and XHTML to plain text with the standard library's `HTMLParser`: block elements
become paragraph breaks; scripts and styles are left out."""

from __future__ import annotations

from html.parser import HTMLParser

_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})


class _TextExtractor(HTMLParser):
    _SKIP = frozenset({"script", "style", "noscript", "template"})
    _BLOCK = frozenset({"p", "div", "br", "li", "tr", "section", "article", *_HEADINGS})

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.title = ""
        self.heading = ""  # the first heading's text
        self._skipping = 0
        self._in_title = False
        self._in_heading = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag == "title":
            self._in_title = True
        elif tag in self._BLOCK:
            self.parts.append("\n\n")
            if tag in _HEADINGS and not self.heading.strip():
                self._in_heading = True

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skipping = max(0, self._skipping - 1)
        elif tag == "title":
            self._in_title = False
        elif tag in self._BLOCK:
            self.parts.append("\n\n")
            if tag in _HEADINGS:
                self._in_heading = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping:
            self.parts.append(data)
            if self._in_heading:
                self.heading += data


def html_text(html: str) -> tuple[str, str, str]:
    """(the `<title>`, the text, the first heading) of an HTML or XHTML page."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    return parser.title.strip(), "".join(parser.parts), " ".join(parser.heading.split())
