"""List and heading numbers as a document shows them: "2.", "b)", "IV.", "1.2.3".

A Word document does not hold the numbers of its numbered lists and headings as text: each
paragraph names a list (`w:numPr`), and Word counts. Read without them, "Section 2.1" and
step 3 of a procedure lose the number a person asks about ("what does step 3 say?").
"""

from __future__ import annotations

import re
from xml.etree import ElementTree

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_ROMAN = (("m", 1000), ("cm", 900), ("d", 500), ("cd", 400), ("c", 100), ("xc", 90), ("l", 50), ("xl", 40),
          ("x", 10), ("ix", 9), ("v", 5), ("iv", 4), ("i", 1))
_PLACE = re.compile(r"%([1-9])")
_LEVELS = 9  # Word's: ilvl 0-8


def counter_text(number: int, style: str) -> str:
    """`number` as a list of `style` writes it: Word's numFmt names (decimal, lowerLetter,
    upperLetter, lowerRoman, upperRoman, decimalZero); any other, or a number out of a style's
    range, in digits."""
    if style in ("lowerLetter", "upperLetter") and number > 0:
        letters = ""
        while number > 0:
            number, rest = divmod(number - 1, 26)
            letters = chr(ord("a") + rest) + letters
        return letters if style == "lowerLetter" else letters.upper()
    if style in ("lowerRoman", "upperRoman") and 0 < number < 4000:
        roman = ""
        for numeral, value in _ROMAN:
            count, number = divmod(number, value)
            roman += numeral * count
        return roman if style == "lowerRoman" else roman.upper()
    if style == "decimalZero" and 0 <= number < 10:
        return f"0{number}"
    return str(number)


def _val(element: ElementTree.Element | None, default: str = "") -> str:
    return element.get(f"{_W}val", default) if element is not None else default


def _int(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default


class WordNumbering:
    """Word's list counters over one document: `label(paragraph)` is the number a numbered
    paragraph shows ("1.2."), "" for any other (a bullet too: its mark says nothing)."""

    def __init__(self, numbering: ElementTree.Element | None, styles: ElementTree.Element | None) -> None:
        # abstract list -> level -> (start, numFmt, lvlText)
        self._levels: dict[str, dict[int, tuple[int, str, str]]] = {}
        self._lists: dict[str, tuple[str, dict[int, int]]] = {}  # numId -> (abstract list, level -> start override)
        self._style_lists: dict[str, tuple[str, str | None]] = {}  # style -> (numId, ilvl), from styles.xml
        self._counts: dict[str, list[int | None]] = {}  # abstract list -> its counters, one per level
        self._started: set[str] = set()  # numIds seen: a start override restarts the count once
        if styles is not None:
            self._read_styles(styles)
        if numbering is not None:
            self._read_numbering(numbering)

    def _read_styles(self, styles: ElementTree.Element) -> None:
        based: dict[str, str] = {}
        for style in styles.iter(f"{_W}style"):
            style_id = style.get(f"{_W}styleId", "")
            based[style_id] = _val(style.find(f"{_W}basedOn"))
            num = style.find(f"{_W}pPr/{_W}numPr")
            if num is not None:
                level = num.find(f"{_W}ilvl")
                self._style_lists[style_id] = (_val(num.find(f"{_W}numId")), _val(level) if level is not None else None)
        for style_id, parent in based.items():  # a style based on a numbered one is numbered as it is
            seen = {style_id}
            while style_id not in self._style_lists and parent and parent not in seen:
                if parent in self._style_lists:
                    self._style_lists[style_id] = self._style_lists[parent]
                seen.add(parent)
                parent = based.get(parent, "")

    def _read_numbering(self, numbering: ElementTree.Element) -> None:
        linked: dict[str, str] = {}  # abstract list -> the numbering style it takes its levels from
        for abstract in numbering.iter(f"{_W}abstractNum"):
            name = abstract.get(f"{_W}abstractNumId", "")
            link = abstract.find(f"{_W}numStyleLink")
            if link is not None:
                linked[name] = _val(link)
            self._levels[name] = {
                _int(level.get(f"{_W}ilvl", ""), 0): (_int(_val(level.find(f"{_W}start"), "1"), 1),
                                                     _val(level.find(f"{_W}numFmt"), "decimal"),
                                                     _val(level.find(f"{_W}lvlText")))
                for level in abstract.iter(f"{_W}lvl")}
        for num in numbering.iter(f"{_W}num"):
            overrides = {_int(o.get(f"{_W}ilvl", ""), 0): _int(_val(o.find(f"{_W}startOverride"), "1"), 1)
                         for o in num.iter(f"{_W}lvlOverride") if o.find(f"{_W}startOverride") is not None}
            self._lists[num.get(f"{_W}numId", "")] = (_val(num.find(f"{_W}abstractNumId")), overrides)
        for name, style in linked.items():  # its levels are those of the list its style names
            num_id = self._style_lists.get(style, ("", None))[0]
            target = self._lists.get(num_id, ("", {}))[0]
            if target in self._levels and target != name:
                self._levels[name] = self._levels[target]

    def label(self, paragraph: ElementTree.Element, style_id: str) -> str:
        """The number `paragraph` (of style `style_id`) shows, counted on: "" where none."""
        num = paragraph.find(f"{_W}pPr/{_W}numPr")
        num_id, level_text = self._style_lists.get(style_id, ("", None))
        if num is not None:
            direct_id, direct_level = num.find(f"{_W}numId"), num.find(f"{_W}ilvl")
            num_id = _val(direct_id) if direct_id is not None else num_id
            level_text = _val(direct_level) if direct_level is not None else level_text
        if not num_id or num_id == "0" or num_id not in self._lists:
            return ""
        abstract, overrides = self._lists[num_id]
        levels = self._levels.get(abstract, {})
        level = min(max(_int(level_text or "0", 0), 0), _LEVELS - 1)
        if level not in levels:
            return ""
        counts = self._counts.setdefault(abstract, [None] * _LEVELS)
        if num_id not in self._started:  # a list that restarts its numbering (1, 2, 3 again)
            self._started.add(num_id)
            for at, start in overrides.items():
                if 0 <= at < _LEVELS:
                    counts[at] = start - 1
        count = counts[level]
        counts[level] = levels[level][0] if count is None else count + 1
        for deeper in range(level + 1, _LEVELS):  # 1.2 after 1.1.3: the deeper levels start again
            counts[deeper] = None
        for higher in range(level):  # a level skipped (2.1.1 straight under 2) counts as begun: 2.2 follows
            if counts[higher] is None:
                counts[higher] = levels.get(higher, (1, "", ""))[0]
        _, style, text = levels[level]
        if style in ("bullet", "none") or not text:
            return ""

        def number(match: re.Match[str]) -> str:
            at = int(match.group(1)) - 1
            start, at_style, _ = levels.get(at, (1, "decimal", ""))
            return counter_text(counts[at] or start if at <= level else start, at_style)

        return _PLACE.sub(number, text).strip()
