"""The tests' own house: they mirror the package, and no test module imports another.

- A test of `crag.steps.grading` lives in tests/steps/ (or tests/steps/grading/): every folder
  holding test files mirrors a package of `src/crag/` (tests/benchmarks/ mirrors benchmarks/).
- tests/ itself keeps the tests of crag's top-level modules (`test_cost.py` for `crag/cost.py`)
  and the cross-cutting ones (layers, public API, docs examples, chaos); a top-level test named
  after a subpackage or a module inside one (`test_grading.py`, `test_evaluation_cli.py`)
  belongs in that subpackage's folder.
- What tests share goes through a `conftest.py` (fixtures) or `support/` (helpers, fakes,
  constants): no module under tests/ imports a test module or a `conftest`.
- Test files have unique names: pytest's default import mode imports each by its file name.

Each check is also run on a tree planted with what it must catch, so that it cannot pass by
checking nothing.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from support.paths import REPO

TESTS = REPO / "tests"
PACKAGE = REPO / "src" / "crag"
BESIDE_SRC = {"benchmarks"}  # tests/benchmarks/ mirrors the repository's benchmarks/


def python_files(tests: Path) -> Iterator[Path]:
    """Every Python file under `tests`: tests, conftest files, helpers, scripts beside data."""
    for path in sorted(tests.rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield path


def files_of_tests(tests: Path) -> list[Path]:
    return [p for p in python_files(tests) if p.name.startswith("test_")]


def imported(path: Path) -> Iterator[tuple[str, int]]:
    """(module, line) for every import in `path`, those deferred into a function too."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.module:
                yield node.module, node.lineno
            if node.level or not node.module:  # `from . import test_x`
                yield from ((alias.name, node.lineno) for alias in node.names)


def cross_imports(tests: Path) -> list[str]:
    """Imports of a test module or of a conftest, from anywhere under `tests`."""
    found = []
    for path in python_files(tests):
        for module, line in imported(path):
            last = module.rpartition(".")[2]
            if last.startswith("test_") or last == "conftest":
                found.append(f"{path.relative_to(tests)}:{line} imports {module}")
    return found


def unmirrored(tests: Path, package: Path) -> list[str]:
    """Folders holding test files that mirror no package of `package` (nor benchmarks/)."""
    found = set()
    for path in files_of_tests(tests):
        folder = path.parent.relative_to(tests)
        if folder.parts and folder.parts[0] not in BESIDE_SRC and not (package / folder / "__init__.py").exists():
            found.add(f"tests/{folder.as_posix()}/ (no package src/crag/{folder.as_posix()}/)")
    return sorted(found)


def subpackage_names(package: Path) -> tuple[set[str], set[str]]:
    """(the subpackages' names, the names of the modules inside them), at any depth."""
    packages = {p.parent.name for p in package.rglob("__init__.py") if p.parent != package}
    inside = {p.stem for p in package.rglob("*.py") if p.parent != package and p.stem != "__init__"}
    return packages, inside


def misplaced(tests: Path, package: Path) -> list[str]:
    """Top-level test files named after a subpackage, or after a module inside one, that is
    not also a top-level module: `test_grading.py`, `test_listing.py`, `test_evaluation_cli.py`."""
    packages, inside = subpackage_names(package)
    top_level = {p.stem for p in package.glob("*.py")}
    found = []
    for path in sorted(tests.glob("test_*.py")):
        name = path.stem.removeprefix("test_")
        if name in top_level:
            continue
        home = next((p for p in sorted(packages) if name == p or name.startswith(p + "_")), None)
        if home is not None or name in inside:
            found.append(f"tests/{path.name} (named after crag's {home or name}: move it to its folder)")
    return found


def duplicate_names(tests: Path) -> list[str]:
    names = Counter(p.name for p in files_of_tests(tests))
    return sorted(
        f"{name}: " + ", ".join(str(p.relative_to(tests)) for p in files_of_tests(tests) if p.name == name)
        for name, n in names.items() if n > 1
    )


def test_no_test_module_imports_another_or_a_conftest() -> None:
    assert cross_imports(TESTS) == [], "share it through a conftest.py fixture or a support/ module"


def test_every_folder_of_tests_mirrors_a_package() -> None:
    assert unmirrored(TESTS, PACKAGE) == []


def test_top_level_tests_name_no_module_of_a_subpackage() -> None:
    assert misplaced(TESTS, PACKAGE) == []


def test_test_files_have_unique_names() -> None:
    assert duplicate_names(TESTS) == [], "pytest's default import mode imports a test file by its name"


def test_each_check_catches_what_it_is_for(tmp_path: Path) -> None:
    package = tmp_path / "src" / "crag"
    for module in ("__init__.py", "cost.py", "steps/__init__.py", "steps/grading/__init__.py",
                   "steps/grading/llm.py", "app/__init__.py", "app/server/__init__.py",
                   "app/server/listing.py"):
        (package / module).parent.mkdir(parents=True, exist_ok=True)
        (package / module).touch()
    (package / "sample_data").mkdir()  # a folder of data, not a package
    tests = tmp_path / "tests"
    planted = {
        "conftest.py": "",
        "support/__init__.py": "",
        "support/helpers.py": "from test_cost import X\n",
        "test_cost.py": "X = 1\n",
        "test_grading.py": "",
        "test_steps_cache.py": "",
        "test_listing.py": "from conftest import SAMPLES\n",
        "steps/test_retrieval.py": "def test_x():\n    from test_cost import X\n",
        "steps/grading/test_llm.py": "from . import test_retrieval\n",
        "app/server/test_listing.py": "from support.helpers import Y\n",
        "sample_data/test_samples.py": "",
        "nowhere/test_nothing.py": "",
        "benchmarks/test_smoke.py": "",
        "data/test_data_file.py": "",
    }
    for name, text in planted.items():
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text(text, encoding="utf-8")

    assert cross_imports(tests) == [
        "steps/grading/test_llm.py:1 imports test_retrieval",
        "steps/test_retrieval.py:2 imports test_cost",
        "support/helpers.py:1 imports test_cost",
        "test_listing.py:1 imports conftest",
    ]
    assert unmirrored(tests, package) == [
        "tests/data/ (no package src/crag/data/)",
        "tests/nowhere/ (no package src/crag/nowhere/)",
        "tests/sample_data/ (no package src/crag/sample_data/)",
    ]
    assert misplaced(tests, package) == [
        "tests/test_grading.py (named after crag's grading: move it to its folder)",
        "tests/test_listing.py (named after crag's listing: move it to its folder)",
        "tests/test_steps_cache.py (named after crag's steps: move it to its folder)",
    ]
    assert duplicate_names(tests) == ["test_listing.py: app/server/test_listing.py, test_listing.py"]
