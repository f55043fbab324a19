"""The public surface: everything `crag` exports is listed in `__all__`, and every error is a CragError."""

from __future__ import annotations

import inspect

import crag
import crag.errors


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in vars(crag) if not name.startswith("_") and not inspect.ismodule(getattr(crag, name))}
    assert public == set(crag.__all__)


def test_every_error_class_is_exported_and_derives_from_crag_error() -> None:
    errors = {
        name for name, obj in vars(crag.errors).items()
        if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == "crag.errors"
    }
    assert all(issubclass(getattr(crag.errors, name), crag.CragError) for name in errors)
    assert errors <= set(crag.__all__)
