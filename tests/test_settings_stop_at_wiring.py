"""Settings stop at the wiring: `crag.workflows.factory` and the ingest's own builder
(`crag.ingestion.configured`) read `crag.config`; below them the steps, the models, the index,
and the readers, chunkers and pipeline of the ingest take plain typed arguments.

Every import counts: at the top, deferred into a function, or under `TYPE_CHECKING`. The plain
options each component takes must keep the defaults of the settings they mirror, and the wiring
must carry every value across.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from support.paths import REPO

from crag.config import IndexSettings, Settings
from crag.index import VectorStoreOptions
from crag.ingestion.chunkers import node_parser
from crag.ingestion.chunkers.agentic import agentic_chunker
from crag.ingestion.configured import llm_options, read_limits, vector_store_options
from crag.ingestion.files import ReadLimits
from crag.models import LLMOptions
from crag.steps.postprocessing import PostprocessOptions
from crag.workflows.factory import postprocess_options

SRC = REPO / "src"
BELOW_THE_WIRING = ["crag.steps", "crag.models", "crag.index", "crag.ingestion"]
WIRING = {"crag.ingestion.configured"}  # the ingest's builder; crag.workflows.factory is above these


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def below_the_wiring() -> dict[str, Path]:
    modules = {module_name(p): p for p in sorted((SRC / "crag").rglob("*.py"))}
    return {
        m: p
        for m, p in modules.items()
        if m not in WIRING and any(m == top or m.startswith(top + ".") for top in BELOW_THE_WIRING)
    }


def config_imports(module: str, source: str, *, package: bool = False) -> list[str]:
    """`module:line import` for each import of `crag.config` (or a module inside it) in `source`."""
    home = module if package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):  # function bodies and `if TYPE_CHECKING:` too
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = home.split(".")[: len(home.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        if any(t == "crag.config" or t.startswith("crag.config.") for t in targets):
            found.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    return found


def test_nothing_below_the_wiring_imports_the_settings() -> None:
    modules = below_the_wiring()
    assert {"crag.steps.postprocessing", "crag.index.store", "crag.ingestion.chunkers.agentic"} <= set(modules)
    leaks = [
        leak
        for module, path in modules.items()
        for leak in config_imports(
            module, path.read_text(encoding="utf-8"), package=path.name == "__init__.py"
        )
    ]
    # Read the settings in crag.workflows.factory or crag.ingestion.configured; pass plain values.
    assert leaks == []


PLANTED = """
from typing import TYPE_CHECKING

from crag.errors import ConfigError

if TYPE_CHECKING:
    from crag.config import Settings


def build():
    from ... import config
    import crag.config.steps

    return config
"""


def test_the_guard_finds_deferred_and_type_checking_imports() -> None:
    assert config_imports("crag.ingestion.formats.planted", PLANTED) == [
        "crag.ingestion.formats.planted:7 from crag.config import Settings",
        "crag.ingestion.formats.planted:11 from ... import config",
        "crag.ingestion.formats.planted:12 import crag.config.steps",
    ]


# Each component's plain options, the wiring that fills them, and the settings section they
# mirror (with the options' fields that live in another section).
MIRRORS = {
    "llm": (LLMOptions, llm_options, {}),
    "vector_store": (VectorStoreOptions, vector_store_options, {}),
    "ingest": (ReadLimits, read_limits, {}),
    "postprocess": (
        PostprocessOptions, postprocess_options, {"rerank_concurrency": ("grader", "concurrency")}
    ),
}


def mirrored(settings: Settings, section: str, elsewhere: dict, field: str) -> object:
    where, name = elsewhere.get(field, (section, field))
    return getattr(getattr(settings, where), name)


@pytest.mark.parametrize("section", MIRRORS)
def test_plain_options_keep_the_defaults_of_the_settings(section: str) -> None:
    options, _, elsewhere = MIRRORS[section]
    defaults = options()
    for field in dataclasses.fields(options):
        expected = mirrored(Settings(), section, elsewhere, field.name)
        assert _plain(getattr(defaults, field.name)) == _plain(expected), field.name


def test_the_chunkers_keep_the_defaults_of_the_settings() -> None:
    index = IndexSettings()
    assert node_parser()[1] == node_parser(
        index.chunker, chunk_size=index.chunk_size, chunk_overlap=index.chunk_overlap
    )[1]
    agentic = agentic_chunker(
        threshold=index.agentic_threshold,
        max_tokens=index.chunk_size,
        resolve_pronouns=index.agentic_pronouns,
    )
    assert agentic_chunker()[1] == agentic[1]
    assert node_parser("sentence_window")[1] == f"sentence_window:{index.window_size}"


UNUSUAL = {
    "llm": {"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-x", "timeout": 5,
            "max_retries": 0, "context_window": 4096, "in_flight": 3, "max_tokens": 99},
    "vector_store": {"kind": "server", "uri": "http://chroma:1", "token": "t", "collection": "c"},
    "ingest": {"symlinks": "inside", "max_file_mb": 1, "max_unpacked_mb": 2, "max_text_mb": 3,
               "max_seconds": 4, "max_memory_mb": 5, "max_ocr_pages": 6},
    "postprocess": {"stages": ["rerank", "reorder"], "similarity_cutoff": 0.1,
                    "required_keywords": ["a"], "exclude_keywords": ["b"], "rerank": "lexical",
                    "rerank_depth": 7, "rerank_batch_size": 8, "optimizer_percentile": 0.3,
                    "optimizer_threshold": 0.2, "context_before": 2, "context_after": 3},
    "grader": {"concurrency": 9},
}


@pytest.mark.parametrize("section", MIRRORS)
def test_the_wiring_carries_every_value(section: str) -> None:
    options, wire, elsewhere = MIRRORS[section]
    settings = Settings.model_validate(UNUSUAL)
    wired, defaults = wire(settings), options()
    for field in dataclasses.fields(options):
        value = getattr(wired, field.name)
        assert _plain(value) == _plain(mirrored(settings, section, elsewhere, field.name)), field.name
        unusual = _plain(value) != _plain(getattr(defaults, field.name))
        assert unusual, f"{field.name}: give it a value in UNUSUAL other than its default"


def _plain(value: object) -> object:
    """Lists and tuples alike; a secret by its value."""
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return getattr(value, "get_secret_value", lambda: value)()
