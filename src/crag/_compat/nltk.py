"""The private part of NLTK (written against 3.10.4) that crag's sentence splitter uses.

Punkt learns abbreviations from training text; its English tables lack many that technical
writing is full of ("e.g.", "Fig.", "Eq."), and a loaded `PunktTokenizer` takes no more through
any public call: they go into its parameters, `_params.abbrev_types`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["add_abbreviations"]


def add_abbreviations(tokenizer: Any, abbreviations: Iterable[str]) -> None:
    """Teach a Punkt tokenizer more abbreviations (lower case, without their last period)."""
    tokenizer._params.abbrev_types.update(abbreviations)
