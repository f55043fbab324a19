"""crag's house: each module imports only its own layer or lower ones, with no circles, and only
`crag/_compat/` touches a dependency's private names.

Layers, low to high: the foundation (top-level modules such as errors, events, config; `crag.index`,
`crag.models`, `crag._compat`) -> `crag.ingestion` -> `crag.steps` -> `crag.workflows` ->
`crag.evaluation` -> `crag.app`. `crag/__init__.py` (the public API) and `crag.testing` (fakes
for users' tests) stand above them all. Every import counts, those deferred into a function too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = ["crag.ingestion", "crag.steps", "crag.workflows", "crag.evaluation", "crag.app"]
ON_TOP = {"crag", "crag.testing"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted((SRC / "crag").rglob("*.py"))}


def layer(module: str) -> int:
    if module in ON_TOP:
        return len(LAYERS) + 1
    for rank, prefix in enumerate(LAYERS, start=1):
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return 0  # the foundation


def imports(module: str) -> list[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for every import in `module`, deferred too."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((base, [alias.name for alias in node.names], node.lineno))
    return found


def crag_targets(module: str) -> list[tuple[str, int]]:
    """The crag modules `module` imports (a name taken from a package may be its submodule)."""
    targets = []
    for base, names, line in imports(module):
        if base != "crag" and not base.startswith("crag."):
            continue
        subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES]
        targets += [(t, line) for t in subs] or [(base, line)]
    return [(t, line) for t, line in targets if t in MODULES and t != module]


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = [
        f"{module}:{line} imports {target}"
        for module in MODULES
        for target, line in crag_targets(module)
        if layer(target) > layer(module)
    ]
    assert upward == []


def test_there_are_no_import_circles() -> None:
    graph = {m: {t for t, _ in crag_targets(m)} for m in MODULES}
    # A package's __init__ re-exporting its own submodules is not a circle of dependence.
    for m in graph:
        graph[m] = {t for t in graph[m] if not (MODULES[m].name == "__init__.py" and t.startswith(m + "."))}
    circles = [scc for scc in _strongly_connected(graph) if len(scc) > 1]
    assert circles == []


def test_only_compat_touches_private_names_of_dependencies() -> None:
    leaks = []
    for module in MODULES:
        if module.startswith("crag._compat"):
            continue
        for base, names, line in imports(module):
            if base == "crag" or base.startswith("crag.") or not base:
                continue
            private = [p for p in base.split(".") if p.startswith("_") and not p.startswith("__")]
            private += [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                leaks.append(f"{module}:{line} {base} {names}")
    assert leaks == []


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively (the graph is small, but recursion depth is not ours)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    scc = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        scc.append(member)
                        if member == node:
                            break
                    found.append(sorted(scc))
    return found


@pytest.mark.parametrize("module", ["crag.app.cli", "crag.steps.grading", "crag.events"])
def test_the_checker_sees_imports(module: str) -> None:
    assert crag_targets(module), f"{module} imports crag modules; the checker must see them"
