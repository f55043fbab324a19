"""Ligatures a PDF's own Unicode map gets wrong, mended from the font's glyph names.

Some PDF writers (several US government PDFs in benchmarks/real_documents among them) give a
font's ligature glyphs a `/ToUnicode` entry holding only the ligature's last letter: the
glyph the font names `/fi` is mapped to "i", `/T_h` to "h". pypdf trusts the map, so the text
reads "signiicantly", "he irst member" and "conidence": words no question matches and no
reader wants in an answer. The font's `/Encoding /Differences` still names each glyph, and a
glyph's name is what it is (the Adobe Glyph List's "fi", "ffl", and its "T_h" form for any run
of letters), so each ligature's entry is set again from its name. Only simple fonts carry
names this way; a composite (Type0) font's glyph ids say nothing, and it is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crag.ingestion.formats import pdf_damage

_NAMED = {"/fi": "fi", "/fl": "fl", "/ff": "ff", "/ffi": "ffi", "/ffl": "ffl"}
_SIMPLE = ("/Type1", "/MMType1", "/TrueType")


def ligature_text(name: str) -> str | None:
    """The letters a glyph name stands for when it names a ligature ("/f_i" -> "fi"), else None."""
    if name in _NAMED:
        return _NAMED[name]
    parts = name.lstrip("/").split("_")
    if len(parts) > 1 and all(len(p) == 1 and p.isascii() and p.isalpha() for p in parts):
        return "".join(parts)
    return None


def mend_ligatures(reader: Any) -> int:
    """Set each simple font's ligature codes in its `/ToUnicode` map from their glyph names,
    in the reader's memory only (the file is not written); returns how many fonts changed."""
    from pypdf.generic import DecodedStreamObject, NameObject

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
        stream = DecodedStreamObject()
        stream.set_data(data)
        font[NameObject("/ToUnicode")] = stream
        mended += 1
    return mended


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
