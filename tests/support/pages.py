"""Reading a drawn page as a reader sees it."""

from __future__ import annotations

from html.parser import HTMLParser


class _Text(HTMLParser):
    """Collects the text a reader sees: element content, not attributes, tooltips or styles."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.hidden += tag in ("title", "style", "script")

    def handle_endtag(self, tag: str) -> None:
        self.hidden -= tag in ("title", "style", "script")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.chunks.append(data.strip())


def visible_text(page: str) -> set[str]:
    """The pieces of text `page` shows, without markup, titles, styles or scripts."""
    parser = _Text()
    parser.feed(page)
    parser.close()
    return {c for c in parser.chunks if c}
