"""Ligatures a PDF's own Unicode map gets wrong, mended from the font's glyph names.

Some PDF writers (several US government PDFs in benchmarks/real_documents among them) give a
font's ligature glyphs a `/ToUnicode` entry holding only the ligature's last letter: the
glyph the font names `/fi` is mapped to "i", `/T_h` to "h". pypdf trusts the map, so the text
reads "signiicantly", "he irst member" and "conidence": words no question matches and no
reader wants in an answer. The font's `/Encoding /Differences` still names each glyph, and a
glyph's name is what it is (the Adobe Glyph List's "fi", "ffl", and its "T_h" form for any run
of letters), so each ligature's entry is set again from its name. Only simple fonts carry
names this way; a composite (Type0) font's glyph ids say nothing, and it is left as it is.

The mending is a help, never a reason to skip: a page whose mended map pypdf refuses is read
again with the font's own (`restore_maps`). And where the text holds a ligature character the
font lacks, a browser sets it in a fallback font as a run of its own, which pypdf reads with a
space on each side ("o ﬃ cial"): `join_split_ligatures` joins it to its word again.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from crag.ingestion.formats import pdf_damage

_NAMED = {"/fi": "fi", "/fl": "fl", "/ff": "ff", "/ffi": "ffi", "/ffl": "ffl"}
_SIMPLE = ("/Type1", "/MMType1", "/TrueType")
_LONGEST = 4  # letters: "f_f_i", "T_h"; a longer "ligature" is a glyph name no font draws as one


def ligature_text(name: str) -> str | None:
    """The letters a glyph name stands for when it names a ligature ("/f_i" -> "fi"), else None."""
    if name in _NAMED:
        return _NAMED[name]
    parts = name.lstrip("/").split("_")
    if 1 < len(parts) <= _LONGEST and all(len(p) == 1 and p.isascii() and p.isalpha() for p in parts):
        return "".join(parts)
    return None


def mend_ligatures(reader: Any) -> int:
    """Set each simple font's ligature codes in its `/ToUnicode` map from their glyph names,
    in the reader's memory only (the file is not written); returns how many fonts changed.
    `restore_maps` puts the fonts' own maps back."""
    from pypdf.generic import NameObject

    mended = 0
    for font in _fonts(reader):
        try:
            ligatures = _ligature_codes(font)
            if not ligatures:
                continue
            original = font["/ToUnicode"].get_object().get_data()
        except pdf_damage():  # a damaged font is read as pypdf reads it
            continue
        # A later `bfchar` entry replaces an earlier one for the same code, in pypdf as in the
        # CMap format: the additions go last, before `endcmap` where there is one.
        lines = b"".join(b"<%02x> <%s>\n" % (code, text.encode("utf-16-be").hex().encode())
                         for code, text in sorted(ligatures.items()))
        block = b"%d beginbfchar\n%sendbfchar\n" % (len(ligatures), lines)
        at = original.rfind(b"endcmap")
        data = original[:at] + block + original[at:] if at >= 0 else original + b"\n" + block
        font[NameObject("/ToUnicode")] = _mended_map_type()(data, font["/ToUnicode"])
        mended += 1
    return mended


def restore_maps(reader: Any) -> int:
    """Give every font `mend_ligatures` changed its own `/ToUnicode` map again; returns how many."""
    from pypdf.generic import NameObject

    restored = 0
    for font in _fonts(reader):
        mended = font.get("/ToUnicode")
        if isinstance(mended, _mended_map_type()):
            font[NameObject("/ToUnicode")] = mended.original
            restored += 1
    return restored


@functools.cache
def _mended_map_type() -> type:
    """The class of a mended map, made on first use: pypdf is imported when a PDF is read."""
    from pypdf.generic import DecodedStreamObject

    class MendedMap(DecodedStreamObject):
        """A `/ToUnicode` map with ligature entries added, and the map it replaced."""

        def __init__(self, data: bytes, original: Any) -> None:
            super().__init__()
            self.set_data(data)
            self.original = original

    return MendedMap


def _ligature_codes(font: Any) -> dict[int, str]:
    """{code: letters} for the ligature glyphs a simple font with a `/ToUnicode` map names."""
    if font.get("/Subtype") not in _SIMPLE or "/ToUnicode" not in font:
        return {}
    encoding = font.get("/Encoding")
    encoding = encoding.get_object() if encoding is not None else None
    if not hasattr(encoding, "get") or "/Differences" not in encoding:
        return {}
    codes: dict[int, str] = {}
    code = 0
    for item in encoding["/Differences"]:
        item = item.get_object() if hasattr(item, "get_object") else item
        if isinstance(item, int):  # the code the names after it start from
            code = item
            continue
        text = ligature_text(str(item))
        if text is not None and 0 <= code <= 255:
            codes[code] = text
        code += 1
    return codes


def _fonts(reader: Any) -> Iterator[Any]:
    """Every font the pages and their form XObjects use, each once."""
    seen: set[int] = set()
    try:
        stack = [page.get("/Resources") for page in reader.pages]
    except pdf_damage():  # a damaged page tree: reading the pages says so, not this
        return
    while stack:
        try:
            resources = stack.pop()
            resources = resources.get_object() if resources is not None else None
            if not hasattr(resources, "get") or id(resources) in seen:
                continue
            seen.add(id(resources))
            found = _entries(resources, "/Font")
            inner = [x["/Resources"] for x in _entries(resources, "/XObject")
                     if hasattr(x, "get") and x.get("/Subtype") == "/Form" and "/Resources" in x]
        except pdf_damage():  # a damaged resource dictionary: its fonts stay as read
            continue
        for font in found:
            if hasattr(font, "get") and id(font) not in seen:
                seen.add(id(font))
                yield font
        stack += inner


def _entries(resources: Any, key: str) -> list[Any]:
    """The objects a resource dictionary lists under `key` (/Font, /XObject), resolved."""
    listed = resources.get(key)
    return [ref.get_object() for ref in listed.get_object().values()] if listed is not None else []


# A ligature character set apart: a word and one space before it (pypdf's, where the text did
# not already end in one), and after it the spaces pypdf puts in front of the next run, one its
# own and any the run holds ("Hausdor ﬀ  dimension"), or the end of a line or a punctuation mark.
_SET_APART = re.compile(
    r"(?:(?P<word>[^\W\d_]+) |(?<=\s)|^)(?P<ligature>[\ufb00-\ufb06])(?P<spaces> +|(?=[^\w ])|$)",
    re.MULTILINE)
# Words that stand before a word beginning "fi", "fl" or "st": there the space is the text's own
# ("the ﬁ rst"). No word begins "ff", "ffi" or "ffl", so those join whatever stands before.
_STANDALONE = frozenset({
    "a", "an", "the", "of", "to", "in", "on", "at", "by", "for", "from", "with", "into", "and", "or",
    "but", "so", "if", "as", "than", "is", "are", "was", "were", "be", "has", "have", "had", "will",
    "can", "not", "no", "its", "his", "her", "their", "our", "your", "my", "this", "that", "these",
    "those", "all", "any", "each", "every", "some", "more", "most", "it", "we", "they", "you", "i"})
_STARTS_WORDS = "\ufb01\ufb02\ufb05\ufb06"  # fi, fl, ſt, st
# Adobe's old private-use code points for "fi" and "fl", which Liberation's and Times' maps give
# their ligature glyphs: "\uf001rst" is "first". Only within a word: an icon font uses them too.
_PRIVATE = re.compile(r"(?<=[^\W\d_])[\uf001\uf002]|[\uf001\uf002](?=[^\W\d_])")


def join_split_ligatures(text: str) -> str:
    """`text` with each ligature character that stands apart joined to its word again
    ("o ﬃ cial" -> "oﬃcial", "Hausdor ﬀ  dimension" -> "Hausdorﬀ dimension"), and the
    private-use "fi" and "fl" some fonts' maps give, within a word, as their letters."""
    text = _PRIVATE.sub(lambda m: "fi" if m.group() == "\uf001" else "fl", text)
    return _SET_APART.sub(_joined, text)


def _joined(match: re.Match[str]) -> str:
    word, ligature, spaces = match.group("word"), match.group("ligature"), match.group("spaces")
    after = spaces[1:]  # the space pypdf put after the run
    if word is None:
        return ligature + after
    if ligature in _STARTS_WORDS and word.lower() in _STANDALONE:
        return f"{word} {ligature}{after}"
    return word + ligature + after
