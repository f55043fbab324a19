"""The systems `crag eval` compares, by name: plain RAG, CRAG, and any you register.

A system is a function `(settings, index) -> workflow`, where the workflow's
`run(query=...)` returns a `CragResult`. Built in:

* `rag`: retrieve -> synthesize (`PlainRAGWorkflow`), with CRAG's own retriever and
  synthesizer, so only grading and correction differ.
* `crag`: the corrective workflow as `build_workflow` makes it from the settings.

Others plug in without changing crag: `register_system("crag-tools", build)` from
Python, or `--systems rag,crag,my_package.my_module:build` on the command line.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from crag.config import Settings
from crag.errors import ConfigError
from crag.index import ChunkIndex
from crag.steps.refining import StripRefiner
from crag.steps.synthesis import ExtractiveSynthesizer

Builder = Callable[[Settings, ChunkIndex], Any]


@dataclass(frozen=True)
class System:
    """A named way to answer questions.

    Attributes:
        name: as given to `--systems`.
        build: makes the workflow, once per evaluation.
        grading: whether the system grades its retrieval (a verdict mix and evaluator
            accuracy are reported only for those).
        description: one line for reports.
    """

    name: str
    build: Builder
    grading: bool = True
    description: str = ""


def _build_crag(settings: Settings, index: ChunkIndex) -> Any:
    from crag.workflows.factory import build_workflow

    return build_workflow(settings, index=index)


def _build_rag(settings: Settings, index: ChunkIndex) -> Any:
    """Plain RAG made of the corrective workflow's own retriever and synthesizer."""
    from crag.workflows.plain import PlainRAGWorkflow

    corrective = _build_crag(settings, index)
    reader = None
    if isinstance(corrective.synthesizer, ExtractiveSynthesizer):
        refiner = corrective.refiner
        # Every sentence of every retrieved chunk, none filtered out: the extractive
        # synthesizer then picks the best, as an LLM would read every chunk.
        reader = (
            StripRefiner(refiner.evaluator, max_strips=None, min_score=0.0)
            if isinstance(refiner, StripRefiner)
            else refiner
        )
    return PlainRAGWorkflow(
        retriever=corrective.retriever,
        postprocessors=corrective.postprocessors,  # same stages, so only grading differs
        synthesizer=corrective.synthesizer,
        reader=reader,
        timeout=settings.run.timeout,
        fallback_seconds=settings.run.fallback_seconds,
    )


_REGISTRY: dict[str, System] = {
    "rag": System(
        "rag", _build_rag, grading=False, description="plain RAG: retrieve -> synthesize"
    ),
    "crag": System("crag", _build_crag, description="corrective RAG (the configured workflow)"),
}


def register_system(
    name: str, build: Builder, *, grading: bool = True, description: str = ""
) -> System:
    """Make `name` available to `crag eval --systems`; replaces a system of the same name."""
    if not name or "," in name or ":" in name:
        raise ConfigError(f"A system name must be non-empty without ',' or ':', not {name!r}.")
    system = System(name, build, grading=grading, description=description)
    _REGISTRY[name] = system
    return system


def available_systems() -> list[str]:
    return sorted(_REGISTRY)


def resolve_systems(spec: str | Sequence[str]) -> list[System]:
    """Systems from a comma-separated spec: registered names or `module:function` builders.

    Raises:
        ConfigError: an unknown name, an unimportable builder, or no system at all.
    """
    names = [n.strip() for n in (spec.split(",") if isinstance(spec, str) else spec) if n.strip()]
    if not names:
        raise ConfigError("No systems to evaluate; pass e.g. --systems rag,crag.")
    if len(set(names)) != len(names):
        raise ConfigError(f"A system is named twice in {','.join(names)}.")
    return [_resolve(name) for name in names]


def _resolve(name: str) -> System:
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" not in name:
        raise ConfigError(
            f"Unknown system {name!r}; expected one of {', '.join(available_systems())} "
            "or module:function."
        )
    module_name, _, attr = name.partition(":")
    try:
        build = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"Cannot load system {name!r}: {exc}.") from None
    if not callable(build):
        raise ConfigError(
            f"System {name!r} is not callable; expected a function (settings, index) -> workflow."
        )
    return System(name, build, description=f"{name} (loaded)")
