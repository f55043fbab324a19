"""Settings: defaults < crag.toml < environment (CRAG_SECTION__KEY) < arguments.

    [grader]
    kind = "lexical"     # or "llm", "auto"
    upper = 0.62

becomes `Settings().grader.upper`; `CRAG_GRADER__UPPER=0.7` overrides the file.

The sections live by job: `crag.config.ingest` (reading, chunking, the vector store),
`crag.config.steps` (a question's steps) and `crag.config.runs` (the model, budgets, the cache,
the run and the server); every name is imported from here. Settings stop at the wiring
(`crag.workflows.factory`, `crag.ingestion.configured`): below it, components take plain
arguments, and `tests/test_settings_stop_at_wiring.py` keeps it so.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from crag.config.ingest import IndexSettings, IngestSettings, VectorStoreSettings
from crag.config.runs import (
    BudgetSettings,
    CacheSettings,
    LLMSettings,
    RunSettings,
    ServerSettings,
    is_local_url,
)
from crag.config.section import Section
from crag.config.steps import (
    DecomposerSettings,
    GraderSettings,
    PostprocessSettings,
    PostprocessStage,
    RefinerSettings,
    RerankerSettings,
    RetrieverSettings,
    RewriterSettings,
    SynthesizerSettings,
    WebSearchSettings,
)
from crag.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "CONFIG_FILE",
    "ENV_PREFIX",
    "BudgetSettings",
    "CacheSettings",
    "DecomposerSettings",
    "GraderSettings",
    "IndexSettings",
    "IngestSettings",
    "LLMSettings",
    "PostprocessSettings",
    "PostprocessStage",
    "RefinerSettings",
    "RerankerSettings",
    "RetrieverSettings",
    "RewriterSettings",
    "RunSettings",
    "ServerSettings",
    "Settings",
    "SynthesizerSettings",
    "VectorStoreSettings",
    "WebSearchSettings",
    "is_local_url",
]

CONFIG_FILE = "crag.toml"
ENV_PREFIX = "CRAG_"
ALLOW_READERS = "CRAG_ALLOW_READERS"  # =1: run readers named by a ./crag.toml found, not given


class Settings(Section):
    """Every setting crag reads, grouped by the component it configures."""

    index: IndexSettings = IndexSettings()
    ingest: IngestSettings = IngestSettings()
    retriever: RetrieverSettings = RetrieverSettings()
    vector_store: VectorStoreSettings = VectorStoreSettings()
    postprocess: PostprocessSettings = PostprocessSettings()
    grader: GraderSettings = GraderSettings()
    reranker: RerankerSettings = RerankerSettings()
    refiner: RefinerSettings = RefinerSettings()
    decomposer: DecomposerSettings = DecomposerSettings()
    rewriter: RewriterSettings = RewriterSettings()
    web_search: WebSearchSettings = WebSearchSettings()
    synthesizer: SynthesizerSettings = SynthesizerSettings()
    llm: LLMSettings = LLMSettings()
    budget: BudgetSettings = BudgetSettings()
    cache: CacheSettings = CacheSettings()
    run: RunSettings = RunSettings()
    server: ServerSettings = ServerSettings()

    @classmethod
    def load(
        cls,
        config_file: str | Path | None = None,
        env: dict[str, str] | None = None,
        **overrides: dict[str, Any],
    ) -> Settings:
        """Merge defaults, the TOML file, the environment and `overrides` (section -> values)."""
        env = dict(os.environ) if env is None else env
        merged: dict[str, dict[str, Any]] = {}
        toml, given = _read_toml(config_file), (_from_env(env), overrides)
        for layer in (toml, *given):
            for section, values in layer.items():
                if not isinstance(values, dict):
                    raise ConfigError(f"Config section [{section}] must be a table of settings.")
                merged.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
        try:
            settings = cls.model_validate(merged)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(f"Invalid crag settings: {problems}") from None
        # Readers are code: from ./crag.toml, found and not given, they run only if allowed.
        found = not config_file and _names_readers(toml) and not any(map(_names_readers, given))
        if found and env.get(ALLOW_READERS, "").strip().lower() not in ("1", "true", "yes"):
            settings.ingest.readers_found_in(Path(CONFIG_FILE).absolute())
        return settings

    def for_collection(self, name: str | None, *, existing: bool = False) -> Settings:
        """These settings for the collection `name` (None: the default, these settings): its
        index folder under `index.path` (crag.index.collections), and on a Chroma server its own
        collections (`<prefix>-<name>-<n>`), everything else as it was. `ConfigError` for a name
        that cannot be one; with `existing`, `IndexNotFoundError` naming the collection when
        nothing is indexed in it yet (the default collection's own error is the index's)."""
        from crag.errors import IndexNotFoundError
        from crag.index.collections import collection_path, holds_index

        root = self.index.path
        path = collection_path(root, name)
        if path == root:
            return self
        if existing and not holds_index(path):
            raise IndexNotFoundError(
                f"No collection {name!r} in {root}: nothing is indexed in it yet. "
                f"Build it first: crag ingest YOUR_DOCS --collection {name} --index {root}"
            )
        # Each index writes `<prefix>-<generation>` on the server: two collections under one
        # prefix would write, prune and search each other's vectors.
        vectors = self.vector_store.model_copy(update={"collection": f"{self.vector_store.collection}-{name}"})
        return self.model_copy(update={"index": self.index.model_copy(update={"path": path}), "vector_store": vectors})


def _names_readers(layer: dict[str, Any]) -> bool:
    section = layer.get("ingest")
    return isinstance(section, dict) and section.get("readers") is not None


def _read_toml(config_file: str | Path | None) -> dict[str, Any]:
    path = Path(config_file) if config_file else Path(CONFIG_FILE)
    if not path.exists():
        if config_file:
            raise ConfigError(f"Config file {path} does not exist.")
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"Config file {path} is not valid TOML: {exc}") from None
    except IsADirectoryError:
        raise ConfigError(f"Config file {path} is a folder; give a crag.toml file.") from None
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {path}: {exc.strerror or exc}.") from None


def _from_env(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, value in env.items():
        if name.startswith(ENV_PREFIX) and "__" in name:
            section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
            out.setdefault(section, {})[key] = value
    # The ecosystem's own variable names, so existing set-ups work unchanged.
    aliases = {
        "OPENAI_API_KEY": ("llm", "api_key"),
        "OPENAI_BASE_URL": ("llm", "base_url"),
        "OPENAI_MODEL": ("llm", "model"),
        "TAVILY_API_KEY": ("web_search", "api_key"),
        "CRAG_RERANKER_API_KEY": ("reranker", "api_key"),
        "CRAG_API_KEY": ("server", "api_key"),
    }
    for name, (section, key) in aliases.items():
        if env.get(name):
            out.setdefault(section, {}).setdefault(key, env[name])
    return out
