"""The `crag` command line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import SAMPLES, SHARED_DATA
from support.workflow import ALL_STEPS

from crag.app.cli import main
from crag.trace import RunTrace


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
    for step in ALL_STEPS:
        assert step in text


WEB_QUESTION = "Who invented the lithium-ion battery?"


def test_ask_shows_steps_on_stderr_and_keeps_json_stdout_one_object(
    capsys: pytest.CaptureFixture[str], sample_index_dir: Path
) -> None:
    argv = ["ask", WEB_QUESTION, "--index", str(sample_index_dir), "--web-corpus", str(SAMPLES / "web.jsonl")]
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["verdict"] == "incorrect"  # the whole of stdout parses
    lines = err.splitlines()  # not a terminal: plain lines
    assert lines[0] == "crag: retrieve started" and "crag: synthesize started" in lines
    assert any(line.startswith("crag: web_search finished in ") for line in lines)
    assert main([*argv, "--quiet"]) == 0 and capsys.readouterr().err == ""


def test_ask_saves_the_trace_and_draw_shows_it(
    capsys: pytest.CaptureFixture[str], sample_index_dir: Path, tmp_path: Path
) -> None:
    trace_file, page, chart = tmp_path / "run.json", tmp_path / "run.html", tmp_path / "run.mmd"
    argv = ["ask", WEB_QUESTION, "--index", str(sample_index_dir), "--web-corpus", str(SAMPLES / "web.jsonl")]
    assert main([*argv, "--json", "--quiet", "--trace", str(trace_file)]) == 0
    result = json.loads(capsys.readouterr().out)
    trace = RunTrace.model_validate_json(trace_file.read_text())
    assert trace == RunTrace.model_validate(result["trace"]) and trace.verdict == "incorrect"
    assert main(["draw", "--trace", str(trace_file), "--out", str(page)]) == 0
    html = page.read_text()
    assert "“Who invented the lithium-ion battery?”" in html and ">incorrect</span>" in html
    assert 'class="node step dim"' in html  # refine_internal: not taken
    assert main(["draw", "--trace", str(trace_file), "--format", "mermaid", "--out", str(chart)]) == 0
    assert chart.read_text().startswith('---\ntitle: "incorrect in ') and ":::dim" in chart.read_text()


def test_draw_names_its_output_after_what_it_draws(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["draw"]) == 0 and main(["draw", "--format", "mermaid"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crag-graph.html", "crag-graph.mmd"]
    capsys.readouterr()
    assert main(["draw", "--format", "mermaid", "--out", "-"]) == 0
    assert capsys.readouterr().out.startswith("flowchart TD\n")


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "No trace file at"),
        ("not json at all", "is not a crag run trace"),
        ('{"steps": 3}', "is not a crag run trace (steps:"),
        ('{"steps": [{"name": "write", "input_event": "StartEvent", "started": 0}]}', "does not have"),
    ],
)
def test_draw_with_a_missing_or_unusable_trace_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | None, message: str
) -> None:
    trace_file = tmp_path / "run.json"
    if content is not None:
        trace_file.write_text(content)
    assert main(["draw", "--trace", str(trace_file), "--out", str(tmp_path / "out.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error:") and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out.html").exists()


def test_ingest_shows_files_and_chunks_on_stderr(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["ingest", str(SAMPLES / "docs"), "--index", str(tmp_path / "index")]) == 0
    out, err = capsys.readouterr()
    assert "4 file(s) read" in out and "crag:" not in out
    assert err.startswith("crag: read 4/4 files in ") and "crag: embed " in err and "chunks/s" in err


def test_adding_a_file_keeps_the_chunker_the_index_was_built_with(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    index = str(tmp_path / "index")
    assert main(["ingest", str(SAMPLES / "docs"), "--index", index, "--chunker", "sentence_window", "-q"]) == 0
    (tmp_path / "extra.md").write_text("Extra notes about tea.", encoding="utf-8")
    assert main(["ingest", str(tmp_path / "extra.md"), "--index", index, "-q"]) == 0
    assert "1 chunk(s) added" in capsys.readouterr().out  # not the whole index cut again
    assert main(["ask", "What warranty does Lumen give?", "--index", index, "--postprocess", "sentence_window"]) == 0
    capsys.readouterr()
    assert main(["ingest", str(tmp_path / "extra.md"), "--index", index, "--chunker", "sentence", "-q"]) == 0
    added, total = re.search(r"(\d+) chunk\(s\) added; (\d+) chunk", capsys.readouterr().out).groups()
    assert added == total  # told to: every file cut again


def test_a_reader_that_stops_early_is_no_error(sample_index_dir: Path) -> None:
    code = "import sys; from crag.app.cli import main; sys.exit(main(sys.argv[1:]))"
    ask = subprocess.Popen(
        [sys.executable, "-c", code, "ask", "What warranty does Lumen give on the Helio H10?", "--index",
         str(sample_index_dir), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    ask.stdout.close()  # as `| head -0` does
    assert ask.wait(60) == 0 and b"error" not in ask.stderr.read()
