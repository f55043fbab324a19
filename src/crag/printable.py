"""Text from documents as a terminal may be given it: control characters shown, not obeyed.

A file name, a title or a document's text is the document's to say, and a terminal obeys what
it is sent: ESC starts a sequence that clears the screen, moves the cursor back over earlier
lines (to forge a `verdict:` line), sets the window's title or, through OSC 52, the clipboard;
BEL rings; a carriage return writes over the line. The bidirectional controls (U+202A-U+202E,
U+2066-U+2069) reorder what is shown. Every printer of the command line (its answer, sources,
notes, skip lines, progress) passes what it prints through `printable`, which writes each such
character as its Python escape (`\\x1b`, `\\u202e`), so the reader sees it and nothing happens.
"""

from __future__ import annotations

import re

# C0 but tab and newline, DEL, C1 (an 8-bit CSI is U+009B), the bidirectional controls.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
_IN_TEXT = re.compile(f"[{_CONTROLS}]")
_IN_LINE = re.compile(f"[{_CONTROLS}\t\n]")
_IN_JSON = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # JSON escapes C0 itself


def _escaped(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def printable(text: str, *, lines: bool = True) -> str:
    """`text` with every control character written as its escape; `lines=False` for what must
    stay on one line (a file name, a title: a newline in one could start a forged line)."""
    return (_IN_TEXT if lines else _IN_LINE).sub(_escaped, text)


def printable_json(text: str) -> str:
    """JSON text (`json.dumps`, which escapes C0 but not C1 or the bidirectional controls when
    `ensure_ascii=False`) with those escaped too, as `\\u009b`: the same JSON, read back."""
    return _IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
