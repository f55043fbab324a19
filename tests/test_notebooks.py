"""The notebooks run top to bottom, offline, in a real Jupyter kernel, and show the pictures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from support.paths import REPO

NOTEBOOKS = REPO / "notebooks"
KERNEL = "crag-test"

# Run first, not stored in the notebooks: the kernel may reach loopback only, like the tests.
NO_NETWORK = """\
import socket
_connect = socket.socket.connect
def _loopback_only(self, address):
    host = address[0] if isinstance(address, tuple) else address
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
        raise OSError(f"notebooks may not reach the network (tried {address!r})")
    return _connect(self, address)
socket.socket.connect = _loopback_only
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A kernelspec for this very interpreter (the venv's, with crag installed), found first."""
    jupyter = tmp_path_factory.mktemp("jupyter")
    spec = jupyter / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(jupyter))
        yield KERNEL


def execute(name: str, kernel: str, cwd: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(NO_NETWORK))
    NotebookClient(nb, kernel_name=kernel, timeout=120, resources={"metadata": {"path": str(cwd)}}).execute()
    return nb  # a cell that raises fails the test above (CellExecutionError)


def html_outputs(nb: nbformat.NotebookNode) -> list[str]:
    return [out["data"]["text/html"] for cell in nb.cells if cell.cell_type == "code"
            for out in cell.outputs if "text/html" in out.get("data", {})]


def printed(nb: nbformat.NotebookNode) -> str:
    return "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                   for out in cell.outputs if out.get("name") == "stdout")


@pytest.mark.parametrize("name", ["quickstart.ipynb", "custom_steps.ipynb"])
def test_notebook_is_stored_without_outputs(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_quickstart_runs_offline_and_shows_the_graph_and_a_run(kernel: str, tmp_path: Path) -> None:
    nb = execute("quickstart.ipynb", kernel, tmp_path)
    out = printed(nb)
    assert "correct | " in out and "incorrect | searched the web for:" in out  # await, then .ask
    assert "retrieve         started" in out and "verdict: ambiguous" in out  # streamed progress
    pictures = html_outputs(nb)
    assert len(pictures) == 3 and all("<svg" in p and "<script" not in p for p in pictures)
    assert "not taken" not in pictures[0] and "not taken" in pictures[1]  # all flows, then one run
    assert ">incorrect</span>" in pictures[1] and "with OneSentence" in pictures[2]
    # `workflow` and `web` displayed themselves (_repr_html_): the graph with grade's verdict edges,
    # and the run explained: its verdict rule, grades against the thresholds, answer and sources.
    assert "Correct · Ambiguous" in pictures[0] and "<h1>CorrectiveRAGWorkflow</h1>" in pictures[0]
    assert "<b>Why:</b> Incorrect:" in pictures[1] and 'class="threshold lower"' in pictures[1]
    assert 'href="#crag-source-1"' in pictures[1] and "Dropped by refinement" in pictures[1]
    assert not list(tmp_path.iterdir())  # nothing written where the notebook ran


def test_custom_steps_plugs_in_a_grader_and_a_search_tool(kernel: str, tmp_path: Path) -> None:
    nb = execute("custom_steps.ipynb", kernel, tmp_path)
    out = printed(nb)
    assert "a Grader: True" in out and "a WebSearch: True" in out
    assert "correct [('overlap'," in out  # the custom grader graded the handbook question
    assert "incorrect | the search tool was asked:" in out and "https://example.org/solar-panels" in out
    (picture,) = html_outputs(nb)
    assert "OverlapGrader and PageSearch" in picture and ">incorrect</span>" in picture
