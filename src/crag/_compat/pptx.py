"""The private part of python-pptx (written against 1.0.2) that crag's slide reader uses.

A paragraph's automatic numbering (`a:buAutoNum`: "1.", "a)", "iv.") sits in its properties
element, which python-pptx reads for no public property: its `_Paragraph` keeps the element
as `_p`. Without it, a numbered list's "step 2" is read as a bullet with no number.
"""

from __future__ import annotations

from typing import Any

__all__ = ["paragraph_properties"]


def paragraph_properties(paragraph: Any) -> Any:
    """The paragraph's `a:pPr` element (lxml), or None when it has none."""
    return paragraph._p.pPr
