"""One wiring layer: `build_workflow` turns settings into components and a workflow, and every
door (Python, `crag ask`, `crag serve`, `crag eval`) goes through it, so the same crag.toml gives
the same pipeline whichever way a question arrives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.paths import SAMPLES
from support.workflow import ALL_STEPS
from workflows.utils import get_steps_from_instance

import crag.workflows.factory as factory
from crag import Settings, build_workflow
from crag.app.cli import main
from crag.app.server import build_server
from crag.evaluation.systems import resolve_systems
from crag.index import ChunkIndex

QUESTION = "What warranty does Lumen give on the Helio H10?"


def pipeline(workflow: Any) -> dict[str, object]:
    """What a workflow does with a question: its steps, components, stages and limits."""
    parts = {
        "retriever": workflow.retriever, "grader": workflow.grader, "refiner": workflow.refiner,
        "rewriter": workflow.rewriter, "searcher": workflow.searcher, "synthesizer": workflow.synthesizer,
        "decomposer": workflow.hops.decomposer, "judge": workflow.retrieval.judge, "condenser": workflow.condenser,
    }
    return {
        "steps": sorted(get_steps_from_instance(workflow)),
        **{part: type(component).__name__ for part, component in parts.items()},
        "stages": [getattr(p, "name", type(p).__name__) for p in workflow.postprocessors],
        "thresholds": (workflow.upper, workflow.lower, workflow.cover),
        "budget": workflow.budget.model_dump(),
        "timeout": workflow._timeout,
    }


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every workflow `build_workflow` makes during the test, whoever asked for it."""
    made: list[Any] = []
    real = factory.build_workflow

    def spy(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(factory, "build_workflow", spy)
    return made


@pytest.fixture
def config(tmp_path: Path, own_sample_index_dir: Path) -> Path:
    path = tmp_path / "crag.toml"
    path.write_text(f"""
[index]
path = "{own_sample_index_dir}"
[retriever]
top_k = 3
[postprocess]
stages = ["reorder"]
required_keywords = ["Helio"]
[grader]
upper = 0.7
[web_search]
corpus = "{SAMPLES / 'web.jsonl'}"
[budget]
calls = 9
[run]
timeout = 30
""", encoding="utf-8")
    return path


def test_the_same_settings_give_the_same_pipeline_through_every_door(
    config: Path, built: list[Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRAG_BUDGET__CALLS", raising=False)
    settings = Settings.load(config, env={})
    doors = {"python": pipeline(build_workflow(settings))}

    assert main(["--config", str(config), "ask", QUESTION, "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"]
    doors["crag ask"] = pipeline(built[-1])

    build_server(settings)
    doors["crag serve"] = pipeline(built[-1])

    (system,) = resolve_systems("crag")
    doors["crag eval"] = pipeline(system.build(settings, ChunkIndex.load(settings.index.path)))

    assert doors["python"]["stages"] == ["keywords", "reorder"], "asking for keywords adds their stage"
    assert doors["python"]["steps"] == ALL_STEPS
    for door, found in doors.items():
        assert found == doors["python"], f"{door} builds another pipeline from the same settings"


def test_keywords_asked_for_anywhere_add_the_keywords_stage() -> None:
    assert Settings.load(env={"CRAG_POSTPROCESS__REQUIRED_KEYWORDS": "helio"}).postprocess.stages == ["keywords"]
    asked = Settings.load(env={}, postprocess={"stages": "reorder", "exclude_keywords": "draft"})
    assert asked.postprocess.stages == ["keywords", "reorder"]
    assert Settings.load(env={}).postprocess.stages == []
