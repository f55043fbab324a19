"""`crag calibrate`: thresholds fitted on labelled pairs, written into crag.toml without harm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.loopback import LoopbackServer, openai_chat
from support.paths import DATA

from crag import ConfigError, Settings
from crag.app.cli import main
from crag.evaluation import settings_file
from crag.evaluation.calibrate import fit_lower, fit_upper
from crag.evaluation.settings_file import set_table_values

QUESTIONS, CORPUS = DATA / "eval_questions.jsonl", DATA / "eval_corpus.jsonl"

# Three relevant chunks and four irrelevant ones.
LABELS = [True, True, True, False, False, False, False]
SCORES = [0.9, 0.8, 0.55, 0.6, 0.3, 0.2, 0.1]


def test_upper_maximises_accuracy_preferring_the_higher_of_equals() -> None:
    # Above 0.6: 2 right of 3 relevant, 4 of 4 irrelevant = 6/7; between 0.3 and 0.55: 3 + 3 = 6/7.
    assert fit_upper(LABELS, SCORES) == pytest.approx(0.7)  # half-way between 0.8 and 0.6


def test_upper_can_target_a_precision_instead() -> None:
    assert fit_upper(LABELS, SCORES, target_precision=1.0) == pytest.approx(0.7)
    assert fit_upper(LABELS, SCORES, target_precision=0.75) == pytest.approx(
        0.425
    )  # 3 of 4 above it
    with pytest.raises(ConfigError, match="No threshold reaches precision"):
        fit_upper([True, False], [0.5, 0.5], target_precision=0.9)


def test_lower_keeps_the_asked_share_of_relevant_chunks_above_it() -> None:
    assert fit_lower(LABELS, SCORES, recall=1.0, upper=0.7) == 0.55
    assert fit_lower(LABELS, SCORES, recall=0.6, upper=0.7) == 0.7  # capped at upper
    assert fit_lower(LABELS, SCORES, recall=0.6, upper=0.85) == 0.8
    with pytest.raises(ConfigError, match="--lower-recall"):
        fit_lower(LABELS, SCORES, recall=0.0, upper=0.7)


def test_nothing_relevant_means_nothing_to_calibrate() -> None:
    with pytest.raises(ConfigError, match="No relevant chunk"):
        fit_upper([False, False], [0.1, 0.2])


def test_calibrate_writes_the_thresholds_and_keeps_the_rest_of_crag_toml(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    toml = tmp_path / "crag.toml"
    toml.write_text(
        '# team settings\n[retriever]\ntop_k = 5  # keep\n\n[grader]\nkind = "lexical"\nupper = 0.9\n'
    )
    args = [
        "--config",
        str(toml),
        "calibrate",
        "--dataset",
        str(QUESTIONS),
        "--corpus",
        str(CORPUS),
        "--write",
        "--json",
    ]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["written"] == str(toml) and result["pairs"] == 50 and result["positives"] > 0
    settings = Settings.load(toml, env={})
    assert (settings.grader.upper, settings.grader.lower) == (result["upper"], result["lower"])
    assert 0.0 <= settings.grader.lower <= settings.grader.upper <= 1.0
    assert settings.retriever.top_k == 5 and settings.grader.kind == "lexical"
    text = toml.read_text()
    assert text.startswith("# team settings\n") and "top_k = 5  # keep" in text
    # The gold passage of every question is told apart: upper separates relevant chunks.
    assert result["at_upper"]["balanced_accuracy"] > 0.9


def test_a_dry_run_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert (
        main(["calibrate", "--dataset", str(QUESTIONS), "--corpus", str(CORPUS), "--dry-run"]) == 0
    )
    out = capsys.readouterr().out
    assert "upper = " in out and "lower = " in out and "nothing written" in out
    assert not (tmp_path / "crag.toml").exists()


def test_without_write_it_only_prints_and_says_how_to_save(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a terminal (a script, CI): nothing written unasked, so later runs keep their thresholds."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["calibrate", "--dataset", str(QUESTIONS), "--corpus", str(CORPUS)]) == 0
    out = capsys.readouterr().out
    assert "upper = " in out and "Nothing written" in out and "--write" in out
    assert not (tmp_path / "crag.toml").exists()
    assert main(["calibrate", "--dataset", str(QUESTIONS), "--corpus", str(CORPUS), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["written"] is None
    assert not (tmp_path / "crag.toml").exists()


@pytest.mark.parametrize("reply, written", [("y", True), ("", False), ("no", False)])
def test_in_a_terminal_it_asks_first(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    reply: str,
    written: bool,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    prompts: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt: prompts.append(prompt) or reply)
    assert main(["calibrate", "--dataset", str(QUESTIONS), "--corpus", str(CORPUS)]) == 0
    assert prompts and "crag.toml" in prompts[0]
    out = capsys.readouterr().out
    assert (tmp_path / "crag.toml").exists() is written
    if written:  # it says which later runs read the file
        assert f"every crag command run in {tmp_path} now uses them" in out
        assert "[grader]" in (tmp_path / "crag.toml").read_text()
    else:
        assert "Nothing written" in out


def test_write_to_a_named_file_says_who_reads_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "tuned.toml"
    args = ["calibrate", "--dataset", str(QUESTIONS), "--corpus", str(CORPUS), "--write", str(target)]
    assert main(args) == 0
    assert f"crag commands given --config {target} use them" in capsys.readouterr().out
    assert target.exists() and not (tmp_path / "crag.toml").exists()


def test_datasets_and_corpora_must_pair_up(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "calibrate",
        "--dataset",
        str(QUESTIONS),
        "--dataset",
        str(QUESTIONS),
        "--corpus",
        str(CORPUS),
    ]
    assert main(args) == 2
    assert "2 --dataset but 1 --corpus" in capsys.readouterr().err


def test_a_new_file_or_table_is_created(tmp_path: Path) -> None:
    set_table_values(tmp_path / "new.toml", "grader", {"upper": 0.5, "lower": 0.25})
    assert Settings.load(tmp_path / "new.toml", env={}).grader.lower == 0.25
    other = tmp_path / "other.toml"
    other.write_text('[llm]\nmodel = "m"\n\n[grader.extra]\n')  # [grader] only through a sub-table
    set_table_values(other, "grader", {"upper": 0.5})
    assert other.read_text() == '[llm]\nmodel = "m"\n\n[grader]\nupper = 0.5\n\n[grader.extra]\n'


def test_only_the_named_keys_change(tmp_path: Path) -> None:
    path = tmp_path / "crag.toml"
    before = (
        '[grader]\nkind = "lexical"   # offline\nupper = 0.6 # was\n\n[refiner]\nmin_score = 0.3\n'
    )
    path.write_text(before)
    set_table_values(path, "grader", {"upper": 0.55, "lower": 0.3})
    assert (
        path.read_text()
        == '[grader]\nkind = "lexical"   # offline\nupper = 0.55 # was\nlower = 0.3\n\n[refiner]\nmin_score = 0.3\n'
    )


@pytest.mark.parametrize(
    "text, edited",
    [
        ("grader = { upper = 0.6 }  # mine\n", "grader = { upper = 0.5 }  # mine\n"),
        ("grader.upper = 0.6\n", "grader.upper = 0.5\n"),
    ],
)
def test_an_inline_table_or_dotted_keys_are_edited_in_their_own_form(
    tmp_path: Path, text: str, edited: str
) -> None:
    path = tmp_path / "crag.toml"
    path.write_text(text)
    set_table_values(path, "grader", {"upper": 0.5})
    assert path.read_text() == edited


@pytest.mark.parametrize(
    "text, message",
    [
        ("[grader\n", "not valid TOML"),
        ("grader = 3\n", "not a table"),
    ],
)
def test_forms_it_cannot_edit_safely_are_refused_untouched(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "crag.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        set_table_values(path, "grader", {"upper": 0.5})
    assert path.read_text() == text


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "crag.toml"
    path.write_text("[grader]\nupper = 0.6\n")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(settings_file.os, "replace", refuse)
    with pytest.raises(ConfigError, match="Cannot write .*No space left"):
        set_table_values(path, "grader", {"upper": 0.5})
    assert path.read_text() == "[grader]\nupper = 0.6\n"
    assert [p.name for p in tmp_path.iterdir()] == ["crag.toml"]


def _answer_aware_model(questions: Path) -> object:
    """A loopback model that rates a document 9 when it holds the question's answer, else 1."""
    answers = {}
    for line in questions.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        answers[row["question"]] = [a.lower() for a in row["answers"]]

    def reply(prompt: str) -> str:
        question = prompt.split("Question: ", 1)[1].split("\n", 1)[0]
        document = prompt.split("Document:", 1)[1].split("Rate how relevant", 1)[0].lower()
        return "9" if any(a in document for a in answers.get(question, [])) else "1"

    return openai_chat(reply)


def test_calibrate_band_fits_the_cascade_against_the_models_grades_and_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "crag.toml"
    target.write_text("# mine\n[grader]\nupper = 0.677\n", encoding="utf-8")
    with LoopbackServer(_answer_aware_model(QUESTIONS)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        args = ["calibrate", "--band", "--dataset", str(QUESTIONS), "--corpus", str(CORPUS),
                "--target-agreement", "0.9", "--write", str(target), "--json"]
        assert main(args) == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["agreement"] >= 0.9 and fit["calls_per_question"] <= fit["chunks_per_question"]
    settings = Settings.load(target, env={})
    assert settings.grader.kind == "cascade"
    assert (settings.grader.band_low, settings.grader.band_high) == (fit["band_low"], fit["band_high"])
    assert target.read_text(encoding="utf-8").startswith("# mine\n"), "the file's comments stay"


def test_calibrate_band_without_a_model_says_what_it_needs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    assert main(["calibrate", "--band", "--dataset", str(QUESTIONS), "--corpus", str(CORPUS)]) == 2
    assert "configure a model" in capsys.readouterr().err
