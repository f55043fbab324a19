"""The public surface: everything `crag` exports is listed in `__all__`, and every error is a CragError."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys

from support.paths import REPO

import crag
import crag.errors

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = REPO


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in dir(crag) if not name.startswith("_") and not inspect.ismodule(getattr(crag, name))}
    assert public == set(crag.__all__)


def test_type_checkers_see_each_public_name_from_its_module() -> None:
    """`__all__` is computed from `crag._EXPORTS`, so type checkers read the names from the
    imports under TYPE_CHECKING instead (each `X as X`, which marks a re-export): those must
    be the same names, from the same modules."""
    tree = ast.parse((ROOT / "src" / "crag" / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "_TYPE_CHECKING")
    imported: dict[str, set[str]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module, ast.unparse(node)
        assert all(alias.asname == alias.name for alias in node.names), ast.unparse(node)
        imported.setdefault(node.module, set()).update(alias.name for alias in node.names)
    assert imported == {module: set(names) for module, names in crag._EXPORTS.items()}


def test_importing_crag_loads_nothing_heavy() -> None:
    """`import crag` (and so `crag --help`) must not pay for llama-index, models or stores."""
    code = "import sys, crag; print(sorted(m for m in sys.modules if m.split('.')[0] in HEAVY))"
    heavy = "{'llama_index', 'workflows', 'numpy', 'pydantic', 'wordllama', 'bm25s', 'chromadb'}"
    out = subprocess.run([sys.executable, "-c", f"HEAVY = {heavy}; {code}"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_cli_parses_its_arguments_before_importing_anything_heavy() -> None:
    code = (
        "import sys\nfrom crag.app.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'llama_index', 'numpy', 'pydantic', 'workflows'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("[]")


def test_every_error_class_is_exported_and_derives_from_crag_error() -> None:
    errors = {
        name for name, obj in vars(crag.errors).items()
        if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == "crag.errors"
    }
    assert all(issubclass(getattr(crag.errors, name), crag.CragError) for name in errors)
    assert errors <= set(crag.__all__)


def test_a_verdict_prints_as_its_value() -> None:
    assert str(crag.Verdict.AMBIGUOUS) == "ambiguous" == f"{crag.Verdict.AMBIGUOUS}"


def test_every_install_command_names_crags_own_distribution() -> None:
    """`crag` on PyPI is someone else's project: every `pip install` of an extra that crag
    prints or documents names the distribution pyproject.toml declares (the import name and
    the command stay `crag`); `pip install -e ".[mcp]"` in a checkout needs no name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = "|".join(project["optional-dependencies"])
    command = re.compile(rf"pip install\s+['\"]?([A-Za-z][\w.-]*)\[(?:{extras})\]")
    files = [*(ROOT / "src").rglob("*.py"), *(ROOT / "docs").rglob("*.md"), ROOT / "README.md",
             ROOT / "crag.example.toml"]
    named = [(path.relative_to(ROOT).as_posix(), name)
             for path in files for name in command.findall(path.read_text(encoding="utf-8"))]
    assert len(named) >= 5  # the hints for eval, chroma, mcp and office are all found
    assert [(path, name) for path, name in named if name != project["name"]] == []
