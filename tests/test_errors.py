"""The error tree drawn in `crag/errors.py`'s docstring is the whole tree: every exception class
crag defines, wherever it lives, derives from `CragError` and is drawn under its own parent,
with its module when that is not `crag.errors`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import crag
import crag.errors
from crag.errors import CragError

# A drawn line: the branch glyphs, the class name, "(its.module)" when not crag.errors.
_LINE = re.compile(
    r"^(?P<indent>[ │├└─]*?)(?P<name>[A-Z]\w*)(?:\s+\((?P<module>crag[\w.]*)\))?(?:\s|$)"
)


def drawn_tree(doc: str) -> dict[str, tuple[str, str | None]]:
    """class name -> (module, parent's name) for each class drawn in `doc`, read from the block
    that starts at the line `CragError`; a class's parent is the nearest line above it drawn one
    level (four columns) less deep."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "CragError")
    margin = lines[start].index("CragError")
    tree: dict[str, tuple[str, str | None]] = {}
    parents: list[str] = []  # parents[depth] = the last class drawn at that depth
    for line in lines[start:]:
        if not line.strip():
            break
        found = _LINE.match(line[margin:])
        assert found, f"not a line of the tree: {line!r}"
        depth = len(found["indent"]) // 4
        del parents[depth:]
        assert len(parents) == depth, f"drawn deeper than its parent: {line!r}"
        name = found["name"]
        assert name not in tree, f"{name} is drawn twice"
        tree[name] = (found["module"] or "crag.errors", parents[-1] if parents else None)
        parents.append(name)
    return tree


def crag_exceptions() -> set[type[BaseException]]:
    """Every exception class defined in one of crag's modules (each module imported)."""
    found = set()
    for info in pkgutil.walk_packages(crag.__path__, "crag."):
        if info.name.rpartition(".")[2] == "__main__":
            continue  # running it is what importing it does
        module = importlib.import_module(info.name)
        found |= {
            obj for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name
        }
    return found


def crag_parent(cls: type[BaseException]) -> str | None:
    """The name of the base of `cls` that is a CragError (None for CragError itself)."""
    return next((b.__name__ for b in cls.__bases__ if issubclass(b, CragError)), None)


def test_every_exception_class_of_crag_derives_from_crag_error() -> None:
    assert sorted(c.__qualname__ for c in crag_exceptions() if not issubclass(c, CragError)) == []


def test_the_drawn_tree_is_every_error_with_its_module_and_parent() -> None:
    actual = {cls.__name__: (cls.__module__, crag_parent(cls)) for cls in crag_exceptions()}
    assert len(actual) >= 19  # the walk found the classes outside crag.errors too
    assert drawn_tree(crag.errors.__doc__ or "") == actual


def test_the_tree_reader_sees_each_class_depth_and_module() -> None:
    doc = """
    CragError
    ├── ConfigError        a setting is wrong
    │   └── Deeper         (crag.somewhere) under ConfigError
    └── Last               back at the first level
    """
    assert drawn_tree(doc) == {
        "CragError": ("crag.errors", None),
        "ConfigError": ("crag.errors", "CragError"),
        "Deeper": ("crag.somewhere", "ConfigError"),
        "Last": ("crag.errors", "CragError"),
    }
