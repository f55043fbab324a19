"""The `crag` command line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SAMPLES, SHARED_DATA
from crag.cli import main


def ask_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["ask", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_ask_json_has_the_documented_fields(capsys: pytest.CaptureFixture[str], sample_index_dir: Path) -> None:
    out = ask_json(
        capsys, "Who invented the lithium-ion battery?", "--index", str(sample_index_dir),
        "--web-corpus", str(SAMPLES / "web.jsonl"),
    )
    assert {"answer", "verdict", "grades", "sources", "rewritten_query", "timings"} <= set(out)
    assert out["verdict"] == "incorrect"
    assert out["sources"][0]["kind"] == "web" and out["sources"][0]["id"] == "web:lithium-ion-history"
    assert "Goodenough" in out["sources"][0]["text"]
    assert set(out["timings"]) >= {"retrieve", "grade", "rewrite", "web_search", "synthesize"}


def test_ask_prints_answer_verdict_grades_and_sources(capsys: pytest.CaptureFixture[str], sample_index_dir: Path) -> None:
    assert main(["ask", "What warranty does Lumen give on the Helio H10?", "--index", str(sample_index_dir)]) == 0
    out = capsys.readouterr().out
    assert "12-year warranty" in out and "verdict: correct" in out and "grades:" in out and "[1] internal" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ask", "", "--index", "{index}"], "question is empty"),
        (["ask", "anything", "--index", "{missing}"], "No crag index"),
        (["ask", "anything", "--index", "{index}", "--upper", "0.2", "--lower", "0.5"], "must not exceed"),
        (["ask", "anything", "--index", "{index}", "--web-corpus", "{missing}"], "does not exist"),
        (["ingest", "{missing}", "--index", "{tmp}"], "does not exist"),
    ],
)
def test_errors_are_one_clear_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str], sample_index_dir: Path, tmp_path: Path, argv: list[str], message: str
) -> None:
    values = {"index": str(sample_index_dir), "missing": str(tmp_path / "missing"), "tmp": str(tmp_path / "i")}
    assert main([a.format(**values) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error:") and message in err and "Traceback" not in err


def test_ingest_reports_what_it_did(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["ingest", str(SAMPLES / "docs"), "--index", str(tmp_path / "index")]) == 0
    assert "4 file(s) read" in capsys.readouterr().out
    assert main(["ingest", str(SAMPLES / "docs"), "--index", str(tmp_path / "index")]) == 0
    assert "0 file(s) read, 4 unchanged" in capsys.readouterr().out


def test_the_installed_command_runs_the_offline_demo(tmp_path: Path) -> None:
    exe = shutil.which("crag", path=str(Path(sys.executable).parent))
    assert exe, "the crag console script is installed with the package"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([exe, "demo"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "verdict: correct" in done.stdout and "verdict: incorrect" in done.stdout
    assert "https://example.org/wiki/lithium-ion-history" in done.stdout


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "squad-dev.jsonl").exists(), reason="shared data not checked out beside the repo")
def test_squad_questions_are_answered_from_the_ingested_corpus(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["ingest", str(SHARED_DATA / "squad-dev-corpus.jsonl"), "--index", str(tmp_path / "index")]) == 0
    capsys.readouterr()
    questions = [json.loads(line) for line in (SHARED_DATA / "squad-dev.jsonl").read_text().splitlines()[:20]]
    found = 0
    for q in questions:
        out = ask_json(capsys, q["question"], "--index", str(tmp_path / "index"))
        assert out["verdict"] in {"correct", "ambiguous", "incorrect"}
        found += any(s["doc_id"] == q["doc_id"] for s in out["sources"]) or any(
            a.lower() in out["answer"].lower() for a in q["answers"]
        )
    assert found >= 12, f"only {found} of 20 answers used the gold passage or contain a gold answer"


@pytest.mark.parametrize("fmt, marker", [("html", "<svg"), ("mermaid", "flowchart TD")])
def test_draw_writes_every_step_without_network_references(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fmt: str, marker: str
) -> None:
    out = tmp_path / f"graph.{fmt}"
    assert main(["draw", "--out", str(out), "--format", fmt]) == 0
    text = out.read_text()
    assert marker in text and 'src="http' not in text and 'href="http' not in text
    for step in ("retrieve", "grade", "refine_internal", "rewrite", "web_search", "refine_web", "synthesize"):
        assert step in text
