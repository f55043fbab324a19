"""crag's house: each module imports only its own layer or lower ones, with no circles, and only
`crag/_compat/` touches a dependency's private names: by import, by attribute (`x._name`), or by
overriding a private method of a dependency's class. An attribute is judged by the type of what
it is read from (the guard follows annotations, assignments and imports through crag's source):
a private name is crag's own only where a crag class, instance or module defines it.

Layers, low to high: the foundation (top-level modules such as errors, events, config; `crag.index`,
`crag.models`, `crag._compat`) -> `crag.ingestion` -> `crag.steps` -> `crag.workflows` ->
`crag.evaluation` -> `crag.app`. `crag/__init__.py` (the public API) and `crag.testing` (fakes
for users' tests) stand above them all. Every import counts, those deferred into a function too.
"""

from __future__ import annotations

import ast
import importlib
import re
import types
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from support.paths import REPO

SRC = REPO / "src"
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


SOURCES = {m: p.read_text(encoding="utf-8") for m, p in MODULES.items()}


def private_attributes(sources: dict[str, str]) -> list[str]:
    """`module:line x._name` for each private attribute that a module of `sources` outside
    `_compat/` reads or sets on an object whose type is not a crag class (or module) that
    defines the name: a dependency's object, or one whose type the guard cannot tell. By type,
    not name: `self.server._api` fails although `OcrReader` has an `_api` of its own."""
    return _Guard(sources).leaks(m for m in sources if _outside_compat(m))


def _bindings(body: list[ast.stmt]) -> dict[str, list[ast.AST]]:
    """What each name of a module or a function is bound to, nested blocks included (not other
    functions' or classes' bodies): imports (aliases), classes, functions, assignments."""
    found: dict[str, list[ast.AST]] = {}
    work: list[ast.AST] = list(body)
    while work:
        node = work.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.setdefault(node.name, []).append(node)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                found.setdefault(name, []).append(_Imported(node, alias))
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name, value in _targets(target, node.value):
                    found.setdefault(name, []).append(
                        node.annotation if isinstance(node, ast.AnnAssign) else _Value(value))
        elif isinstance(node, ast.arguments):
            for arg in [*node.posonlyargs, *node.args, *node.kwonlyargs]:
                found.setdefault(arg.arg, []).append(arg.annotation or _UNKNOWN)
            for arg in (node.vararg, node.kwarg):
                if arg is not None:
                    found.setdefault(arg.arg, []).append(_UNKNOWN)  # a tuple or a dict of them
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.setdefault(node.id, []).append(_UNKNOWN)  # a loop's, a with's, a walrus'
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue  # their targets are read above
        work += [c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.Lambda)]
    return found


class _Imported:
    def __init__(self, node: ast.Import | ast.ImportFrom, alias: ast.alias) -> None:
        self.node, self.alias = node, alias


class _Value:
    def __init__(self, value: ast.expr | None) -> None:
        self.value = value


_UNKNOWN = _Value(None)


def _targets(target: ast.expr, value: ast.expr | None) -> list[tuple[str, ast.expr | None]]:
    """(name, the value it gets) for each plain name an assignment binds."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, (ast.Tuple, ast.List)):
        values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [None] * len(target.elts)
        if len(values) != len(target.elts):
            values = [None] * len(target.elts)
        return [pair for t, v in zip(target.elts, values) for pair in _targets(t, v)]
    if isinstance(target, ast.Starred):
        return _targets(target.value, None)
    return []


class _Class:
    """One class crag defines: the names it defines, what its attributes hold, its bases."""

    def __init__(self, module: str, node: ast.ClassDef, scope: _Scope) -> None:
        self.module, self.node, self.scope = module, node, scope
        self.defines: set[str] = set()
        self.holds: dict[str, list[tuple[ast.AST, _Scope]]] = {}  # attribute -> what it is given
        self.methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.methods[statement.name] = statement
                self.defines.add(statement.name)
                self._read_method(statement)
            elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                for target in targets:
                    for name, value in _targets(target, statement.value):
                        self.defines.add(name)
                        held = statement.annotation if isinstance(statement, ast.AnnAssign) else _Value(value)
                        self.holds.setdefault(name, []).append((held, scope.inside(self)))
                        if name == "__slots__" and value is not None:
                            self.defines |= {c.value for c in ast.walk(value) if isinstance(c, ast.Constant)}
            elif isinstance(statement, ast.ClassDef):
                self.defines.add(statement.name)

    def _read_method(self, method: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """`self.x = ...` (or `cls.x`) anywhere in `method`, closures included."""
        arguments = [*method.args.posonlyargs, *method.args.args]
        if not arguments or _decorated(method, "staticmethod"):
            return
        me = arguments[0].arg
        scope = self.scope.inside(self).entering(method)
        for node in _walk_function(method):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node is not method:
                continue
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for attribute, value in _attribute_targets(target, node.value, me):
                        self.defines.add(attribute)
                        held = node.annotation if isinstance(node, ast.AnnAssign) else _Value(value)
                        self.holds.setdefault(attribute, []).append((held, scope))
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id == me):
                self.defines.add(node.attr)  # augmented, a loop's, a with's target

    def key(self) -> str:
        return f"{self.module}.{self.node.name}"


def _attribute_targets(target: ast.expr, value: ast.expr | None, me: str) -> list[tuple[str, ast.expr | None]]:
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == me:
        return [(target.attr, value)]
    if isinstance(target, (ast.Tuple, ast.List)):
        values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) \
            else [None] * len(target.elts)
        return [pair for t, v in zip(target.elts, values) for pair in _attribute_targets(t, v, me)]
    return []


def _walk_function(function: ast.AST) -> list[ast.AST]:
    """The nodes of `function`, its closures' included, not those of classes defined in it."""
    nodes, work = [], [function]
    while work:
        node = work.pop()
        nodes.append(node)
        work += [c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.ClassDef)]
    return nodes


def _decorated(function: ast.AST, name: str) -> bool:
    return any(ast.unparse(d).split(".")[-1] == name for d in getattr(function, "decorator_list", []))


# What an expression is, as far as the guard can tell: an instance of a crag class ("instance",
# key), the class itself ("class", key), a crag module ("module", name), a function crag
# defines ("function", node, scope), or anything else (None: a dependency's, or unknown).
Kind = tuple


class _Scope:
    """Where a name is looked up: a module, the class a method belongs to, the functions inside
    which the expression is (innermost last)."""

    def __init__(self, guard: _Guard, module: str, cls: _Class | None = None,
                 functions: tuple[ast.AST, ...] = ()) -> None:
        self.guard, self.module, self.cls, self.functions = guard, module, cls, functions

    def inside(self, cls: _Class) -> _Scope:
        return _Scope(self.guard, self.module, cls, ())

    def entering(self, function: ast.AST) -> _Scope:
        return _Scope(self.guard, self.module, self.cls, (*self.functions, function))

    def kind(self, expr: ast.AST | None) -> Kind | None:
        return self.guard.kind(expr, self)


class _Guard:
    """Judges each private attribute (`x._name`) by what `x` is: a crag class, instance or
    module that defines `_name`, or anything else (a dependency's object, or one the guard
    cannot tell), which crag may not reach into outside `_compat/`."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.trees = {m: ast.parse(s) for m, s in sources.items()}
        self.globals = {m: _bindings(t.body) for m, t in self.trees.items()}
        self.locals: dict[int, dict[str, list[ast.AST]]] = {}
        self.classes: dict[int, _Class] = {}
        self.resolving: set[tuple[int, int]] = set()
        for module, tree in self.trees.items():
            self._find_classes(module, tree, _Scope(self, module))

    def _find_classes(self, module: str, node: ast.AST, scope: _Scope) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                found = self.classes[id(child)] = _Class(module, child, scope)
                self._find_classes(module, child, scope.inside(found))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._find_classes(module, child, scope.entering(child))
            else:
                self._find_classes(module, child, scope)

    def mro(self, cls: _Class) -> list[_Class]:
        """`cls` and the crag classes it derives from (a dependency's base ends a line)."""
        order, work = [], [cls]
        while work:
            current = work.pop(0)
            if current in order:
                continue
            order.append(current)
            for base in current.node.bases:
                kind = current.scope.kind(base)
                if kind and kind[0] == "class":
                    work.append(self.classes[kind[1]])
        return order

    def defines(self, kind: Kind | None, name: str) -> bool:
        if kind is None:
            return False
        if kind[0] in ("instance", "class"):
            return any(name in c.defines for c in self.mro(self.classes[kind[1]]))
        if kind[0] == "module":
            return name in self.globals.get(kind[1], {}) or f"{kind[1]}.{name}" in self.globals
        return False

    # --- what an expression is ------------------------------------------------------------------

    def kind(self, expr: ast.AST | None, scope: _Scope) -> Kind | None:
        if expr is None or isinstance(expr, _Value) and expr.value is None:
            return None
        if isinstance(expr, _Value):
            return self.kind(expr.value, scope)
        guard = (id(expr), id(scope.functions[-1]) if scope.functions else 0)
        if guard in self.resolving:
            return None  # `x = x.parent` and the like
        self.resolving.add(guard)
        try:
            return self._kind(expr, scope)
        finally:
            self.resolving.discard(guard)

    def _kind(self, expr: ast.AST, scope: _Scope) -> Kind | None:
        if isinstance(expr, ast.Name):
            return self.name(expr.id, scope)
        if isinstance(expr, ast.Attribute):
            return self.attribute(scope.kind(expr.value), expr.attr)
        if isinstance(expr, ast.Call):
            return self.call(expr, scope)
        if isinstance(expr, ast.Await):
            return None
        return None

    def name(self, name: str, scope: _Scope) -> Kind | None:
        for depth in range(len(scope.functions) - 1, -1, -1):
            function = scope.functions[depth]
            bound = self._locals(function).get(name)
            if bound is None:
                continue
            outer = _Scope(self, scope.module, scope.cls, scope.functions[: depth + 1])
            me = self._me(function, scope.cls)
            if me is not None and name == me[0]:
                return me[1]
            return self._one([self._bound(b, outer) for b in bound])
        bound = self.globals.get(scope.module, {}).get(name)
        if bound is None:
            return None  # a builtin
        module_scope = _Scope(self, scope.module)
        return self._one([self._bound(b, module_scope) for b in bound])

    def _me(self, function: ast.AST, cls: _Class | None) -> tuple[str, Kind] | None:
        """`self` (or `cls`) of a method of `cls`: its first argument, when not annotated."""
        if cls is None or cls.methods.get(getattr(function, "name", "")) is not function:
            return None
        arguments = [*function.args.posonlyargs, *function.args.args]
        if not arguments or _decorated(function, "staticmethod"):
            return None
        first = arguments[0].arg
        of_class = _decorated(function, "classmethod") or function.name == "__new__"
        return first, ("class" if of_class else "instance", id(cls.node))

    def _locals(self, function: ast.AST) -> dict[str, list[ast.AST]]:
        if id(function) not in self.locals:
            self.locals[id(function)] = _bindings([function.args, *function.body])  # type: ignore[attr-defined]
        return self.locals[id(function)]

    def _bound(self, bound: ast.AST, scope: _Scope) -> Kind | None:
        if isinstance(bound, _Imported):
            return self.imported(bound, scope.module)
        if isinstance(bound, ast.ClassDef):
            return ("class", id(bound))
        if isinstance(bound, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return ("function", bound, scope)
        if isinstance(bound, _Value):
            return self.kind(bound, scope)
        return self.annotation(bound, scope)

    @staticmethod
    def _one(kinds: list[Kind | None]) -> Kind | None:
        """What a name bound several times is: the same thing each time, or unknown."""
        known = {k[:2] if k and k[0] != "function" else k for k in kinds}
        return kinds[0] if len(known) == 1 else None

    def imported(self, bound: _Imported, module: str) -> Kind | None:
        node, alias = bound.node, bound.alias
        if isinstance(node, ast.Import):
            name = alias.name if alias.asname else alias.name.split(".")[0]
            return ("module", name) if name in self.globals else None
        base = node.module or ""
        if node.level:
            package = module if self._is_package(module) else module.rpartition(".")[0]
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(parts + ([base] if base else []))
        if f"{base}.{alias.name}" in self.globals:
            return ("module", f"{base}.{alias.name}")
        if base in self.globals:
            return self.name(alias.name, _Scope(self, base))
        return None

    def _is_package(self, module: str) -> bool:
        return any(m.startswith(module + ".") for m in self.globals)

    def attribute(self, kind: Kind | None, name: str) -> Kind | None:
        if kind is None:
            return None
        if kind[0] == "module":
            if f"{kind[1]}.{name}" in self.globals:
                return ("module", f"{kind[1]}.{name}")
            return self.name(name, _Scope(self, kind[1])) if name in self.globals[kind[1]] else None
        if kind[0] not in ("instance", "class"):
            return None
        for cls in self.mro(self.classes[kind[1]]):
            method = cls.methods.get(name)
            if method is not None:
                if _decorated(method, "property") or _decorated(method, "cached_property"):
                    return self.annotation(method.returns, cls.scope.inside(cls))
                return ("function", method, cls.scope.inside(cls))
            if name in cls.holds:
                return self._one([self._bound(held, scope) for held, scope in cls.holds[name]])
        return None

    def call(self, call: ast.Call, scope: _Scope) -> Kind | None:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "__new__" and call.args:
            made = scope.kind(call.args[0])
            return ("instance", made[1]) if made and made[0] == "class" else None
        kind = scope.kind(func)
        if kind is None:
            return None
        if kind[0] == "class":
            return ("instance", kind[1])
        if kind[0] == "function":
            function, where = kind[1], kind[2]
            if isinstance(function.returns, ast.Name) and function.returns.id == "Self" and where.cls:
                return ("instance", id(where.cls.node))
            return self.annotation(function.returns, where)
        return None

    def annotation(self, expr: ast.AST | None, scope: _Scope) -> Kind | None:
        """What a value annotated `expr` is."""
        if expr is None:
            return None
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            try:
                expr = ast.parse(expr.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            return self._union([expr.left, expr.right], scope)
        if isinstance(expr, ast.Subscript):
            wrapper = ast.unparse(expr.value).split(".")[-1]
            inner = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            if wrapper in ("Optional", "ClassVar", "Final", "Annotated", "Required", "NotRequired"):
                return self.annotation(inner[0], scope)
            if wrapper == "Union":
                return self._union(inner, scope)
            if wrapper == "type":
                made = self.annotation(inner[0], scope)
                return ("class", made[1]) if made and made[0] == "instance" else None
            expr = expr.value  # a generic class of crag's
        if isinstance(expr, ast.Name) and expr.id == "Self" and scope.cls is not None:
            return ("instance", id(scope.cls.node))
        kind = self.kind(expr, _Scope(self, scope.module, scope.cls))
        return ("instance", kind[1]) if kind and kind[0] == "class" else None

    def _union(self, members: list[ast.expr], scope: _Scope) -> Kind | None:
        kept = [m for m in members if not (isinstance(m, ast.Constant) and m.value is None)
                and ast.unparse(m) != "None"]
        return self._one([self.annotation(m, scope) for m in kept]) if kept else None

    # --- the judgement --------------------------------------------------------------------------

    def leaks(self, judged: Iterable[str]) -> list[str]:
        """`module:line x._name` for each private attribute read or set in `judged`'s modules
        on something that does not define it in crag's own code."""
        found = []
        for module in judged:
            for node, scope in self._attributes(module, self.trees[module], _Scope(self, module)):
                if self._allowed(node, scope):
                    continue
                found.append(f"{module}:{node.lineno} {ast.unparse(node)}")
        return sorted(found, key=lambda f: (f.split(":")[0], int(f.split(":")[1].split()[0])))

    def _attributes(self, module: str, node: ast.AST, scope: _Scope) -> Iterator[tuple[ast.Attribute, _Scope]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Attribute) and _private(child.attr):
                yield child, scope
            if isinstance(child, ast.ClassDef):
                yield from self._attributes(module, child, scope.inside(self.classes[id(child)]))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = scope.entering(child) if not isinstance(child, ast.Lambda) else scope
                yield from self._attributes(module, child, inner)
            else:
                yield from self._attributes(module, child, scope)

    def _allowed(self, node: ast.Attribute, scope: _Scope) -> bool:
        value = node.value
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "super" and scope.cls is not None:
            return any(node.attr in c.defines for c in self.mro(scope.cls)[1:])
        return self.defines(scope.kind(value), node.attr)


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
    overrides = {o for m in SOURCES if _outside_compat(m) for o in private_overrides(importlib.import_module(m))}
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
        "crag.app.planted:7 super()._connect",  # the dependency's, as its base is
        "crag.app.planted:11 store._build_filters",
    ]
    assert private_overrides(planted) == [
        "crag.app.planted.Store._connect overrides "
        "llama_agents.server._store.sqlite.sqlite_workflow_store.SqliteWorkflowStore._connect"
    ]


def test_the_guard_judges_an_attribute_by_its_owner_not_its_name(tmp_path: Path) -> None:
    """`self.server` is the dependency's `WorkflowServer`: its `_api` is not crag's, although
    `OcrReader` has an `_api` of its own. Planted in a copy of the module that holds it."""
    module, source = next((m, s) for m, s in SOURCES.items() if "self.server.add_workflow(" in s)
    assert any(re.search(r"self\._api\b", s) for s in SOURCES.values())  # the name crag defines
    planted = tmp_path / MODULES[module].name
    planted.write_text(source.replace("self.server.add_workflow(", "self.server._api.add_workflow(", 1),
                       encoding="utf-8")
    line = next(i for i, text in enumerate(planted.read_text(encoding="utf-8").splitlines(), 1)
                if "self.server._api" in text)
    assert private_attributes({**SOURCES, module: planted.read_text(encoding="utf-8")}) == [
        f"{module}:{line} self.server._api"
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
