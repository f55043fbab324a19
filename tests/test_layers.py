"""crag's house: each module imports only its own layer or lower ones, with no circles, and only
`crag/_compat/` touches a dependency's private names: by import, by attribute (`x._name`), or by
overriding a private method of a dependency's class.

Layers, low to high: the foundation (top-level modules such as errors, events, config; `crag.index`,
`crag.models`, `crag._compat`) -> `crag.ingestion` -> `crag.steps` -> `crag.workflows` ->
`crag.evaluation` -> `crag.app`. `crag/__init__.py` (the public API) and `crag.testing` (fakes
for users' tests) stand above them all. Every import counts, those deferred into a function too.
"""

from __future__ import annotations

import ast
import importlib
import types
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


# Named privately, but what llama-index documents for a subclass to implement (its custom
# embeddings guide; `_aparse_nodes` is `_parse_nodes` made async), beside the methods a
# dependency's class declares abstract, which a subclass must implement.
HOOKS = {"_get_text_embeddings", "_aget_text_embedding", "_aget_text_embeddings", "_aparse_nodes"}


# The standard library's documented functions whose names begin with "_" for history's sake.
STDLIB_PUBLIC = {"_exit"}  # os._exit: how a forked child ends without running its parent's cleanup


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in STDLIB_PUBLIC


def _outside_compat(module: str) -> bool:
    return not module.startswith("crag._compat")


SOURCES = {m: p.read_text(encoding="utf-8") for m, p in MODULES.items() if _outside_compat(m)}


def own_names(sources: dict[str, str]) -> set[str]:
    """The names crag's source defines: functions, classes, arguments, imports, variables, and
    attributes it assigns on `self` or `cls`. By name, so a dependency's private attribute that
    shares its name with one of crag's own goes unseen; overrides are checked apart."""
    names = set()
    for source in sources.values():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                names.add(node.attr)
    return names


def private_attributes(sources: dict[str, str]) -> list[str]:
    """`module:line x._name` for each private attribute used whose name crag does not define."""
    own = own_names(sources)
    return [
        f"{module}:{node.lineno} {ast.unparse(node)}"
        for module, source in sources.items()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own
    ]


def private_overrides(module: types.ModuleType) -> list[str]:
    """`module.Class._name` for each method that a class of `module`, or a crag class it mixes
    in, defines over a private method of a dependency's class it derives from, hooks aside."""
    found = []
    for cls in vars(module).values():
        if not isinstance(cls, type) or cls.__module__ != module.__name__:
            continue
        theirs = [b for b in cls.__mro__ if not b.__module__.startswith("crag")]
        for mine in cls.__mro__:
            if mine in theirs or not _outside_compat(mine.__module__):
                continue
            for name, member in vars(mine).items():
                member = getattr(member, "__func__", getattr(member, "fget", member))
                if not _private(name) or getattr(member, "__module__", None) != mine.__module__:
                    continue  # not crag's code (`_abc_impl`, what a metaclass adds)
                if name in HOOKS or any(_abstract(base, name) for base in theirs):
                    continue
                found += [
                    f"{mine.__module__}.{mine.__name__}.{name} overrides "
                    f"{base.__module__}.{base.__qualname__}.{name}"
                    for base in theirs
                    if name in vars(base)
                ]
    return found


def _abstract(cls: type, name: str) -> bool:
    return getattr(vars(cls).get(name), "__isabstractmethod__", False)


def test_only_compat_reaches_private_attributes_of_dependencies() -> None:
    assert private_attributes(SOURCES) == []


def test_only_compat_overrides_private_methods_of_dependencies() -> None:
    overrides = {o for m in SOURCES for o in private_overrides(importlib.import_module(m))}
    assert overrides == set()


PLANTED = """
from llama_agents.server import HandlerQuery, SqliteWorkflowStore


class Store(SqliteWorkflowStore):
    def _connect(self):
        return super()._connect()


def filters(store: SqliteWorkflowStore) -> object:
    return store._build_filters(HandlerQuery())
"""


def test_the_guard_finds_a_planted_private_attribute_and_override() -> None:
    planted = types.ModuleType("crag.app.planted")
    exec(compile(PLANTED, "planted.py", "exec"), planted.__dict__)
    assert private_attributes({**SOURCES, planted.__name__: PLANTED}) == [
        "crag.app.planted:11 store._build_filters"
    ]
    assert private_overrides(planted) == [
        "crag.app.planted.Store._connect overrides "
        "llama_agents.server._store.sqlite.sqlite_workflow_store.SqliteWorkflowStore._connect"
    ]


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
