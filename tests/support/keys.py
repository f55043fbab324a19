"""The key ring's scrypt, counted: how a test shows that a token costs no scrypt."""

from __future__ import annotations

import pytest

from crag.app import keys


def count_scrypts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gains one element per scrypt derivation the key ring does from now on."""
    counted: list[int] = []
    derive = keys._derive

    def counting(*args: object) -> bytes:
        counted.append(1)
        return derive(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(keys, "_derive", counting)
    return counted
