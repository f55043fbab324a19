"""The ecosystem's own tools work on crag's workflow, as users of LlamaIndex reach for them.

- llama-index-utils-workflow's `draw_all_possible_flows_mermaid` draws `CorrectiveRAGWorkflow`
  (the class, and a built instance) with every step and event of crag's own drawing.
- `nest_asyncio.apply()`, which many notebooks still run first, does not break `workflow.ask`
  or an `asyncio.run` nested inside a running loop. nest_asyncio patches asyncio for the whole
  process, so that part runs in a child interpreter.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from llama_index.utils.workflow import draw_all_possible_flows_mermaid
from support.paths import SAMPLES
from support.workflow import ALL_STEPS

from crag import CorrectiveRAGWorkflow, Settings, build_workflow

EVENTS = ["QueryStartEvent", "CandidatesEvent", "RetrievedEvent", "WebSearchNeededEvent",
          "StopEvent"]


def test_draw_all_possible_flows_mermaid_draws_the_class(tmp_path: Path) -> None:
    out = tmp_path / "flows.mermaid"
    text = draw_all_possible_flows_mermaid(CorrectiveRAGWorkflow, filename=str(out))
    assert text.lstrip().startswith("flowchart") and out.read_text() == text
    for name in ALL_STEPS + EVENTS:
        assert name in text, f"{name} missing from the Mermaid drawing"


def test_draw_all_possible_flows_mermaid_draws_a_built_workflow(
    sample_settings: Settings, tmp_path: Path
) -> None:
    workflow = build_workflow(sample_settings)
    text = draw_all_possible_flows_mermaid(workflow, filename=str(tmp_path / "flows.mermaid"))
    assert all(step in text for step in ALL_STEPS)


NOTEBOOK = """
import asyncio
import nest_asyncio
from crag import Settings, build_workflow

settings = Settings.load(env={{}}, index={{"path": {index!r}}}, web_search={{"corpus": {web!r}}})
workflow = build_workflow(settings)

async def cell():  # a notebook cell: code run inside the kernel's running loop
    nest_asyncio.apply()
    first = workflow.ask("What warranty does Lumen give on the Helio H10?")
    nested = asyncio.run(workflow.run(query="Who invented the lithium-ion battery?"))  # nest_asyncio's way
    awaited = await workflow.run(query="Who invented the lithium-ion battery?")
    return first, nested, awaited

first, nested, awaited = asyncio.run(cell())
print(first.verdict, nested.verdict, awaited.verdict, nested.sources[0].kind)
"""


def test_nest_asyncio_then_ask_in_a_running_loop(sample_index_dir: Path) -> None:
    web = SAMPLES / "web.jsonl"
    script = textwrap.dedent(NOTEBOOK).format(index=str(sample_index_dir), web=str(web))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["correct", "incorrect", "incorrect", "web"]


@pytest.mark.parametrize("module", ["nest_asyncio", "llama_index.utils.workflow"])
def test_the_compatibility_packages_are_test_only(module: str) -> None:
    """crag itself never imports them: they are in the test extra, not the dependencies."""
    code = f"import sys, crag.workflows.factory, crag.app.cli; print({module!r} in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
