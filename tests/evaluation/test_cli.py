"""`crag eval` end to end on ten hand-made questions, and on the shared SQuAD dev set when present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.paths import DATA, SHARED_DATA

from crag import Settings
from crag.app.cli import main
from crag.evaluation.datasets import Passage, load_corpus, write_corpus
from crag.evaluation.runner import EvalOptions, evaluate

QUESTIONS, CORPUS = DATA / "eval_questions.jsonl", DATA / "eval_corpus.jsonl"


def eval_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert (
        main(["eval", "--dataset", str(QUESTIONS), "--corpus", str(CORPUS), *args, "--json"]) == 0
    )
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def split(report: dict, system: str, name: str) -> dict:
    (found,) = [s for s in report["systems"] if s["name"] == system]
    return found["splits"][name]


def test_a_ten_question_eval_compares_crag_with_plain_rag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = eval_json(capsys, "--drop-gold", "0.5", "--seed", "0", "--out", str(tmp_path / "out"))
    assert (report["questions"], report["gold_dropped_questions"], report["drop_gold"]) == (
        10,
        5,
        0.5,
    )
    assert [s["name"] for s in report["systems"]] == ["rag", "crag"]
    rag_dropped, crag_dropped = (
        split(report, "rag", "gold-dropped"),
        split(report, "crag", "gold-dropped"),
    )
    rag_present, crag_present = (
        split(report, "rag", "gold-present"),
        split(report, "crag", "gold-present"),
    )
    # Without its gold passage plain RAG cannot answer; CRAG finds it on the web.
    assert rag_dropped["gold_retrieved"] == 0.0 and rag_dropped["answer_accuracy"] <= 0.2
    assert crag_dropped["gold_in_context"] >= 0.8 and crag_dropped["answer_accuracy"] >= 0.8
    assert crag_present["answer_accuracy"] >= rag_present["answer_accuracy"] >= 0.8
    # Every dropped question is sent to the web (a question describing what it asks about may
    # search again for its second hop); the present ones are answered from the index.
    assert (
        crag_dropped["verdicts"]["correct"] == 0.0
        and 1.0 <= crag_dropped["search_calls_per_question"] <= 3.0
    )
    assert crag_present["verdicts"]["correct"] >= 0.8
    assert rag_present["verdicts"] is None and rag_present["search_calls_per_question"] == 0.0
    evaluator = split(report, "crag", "all")["evaluator"]
    assert evaluator["is_gold"]["n"] == evaluator["has_answer"]["n"] > 0
    assert evaluator["is_gold"]["roc_auc"] > 0.9
    assert evaluator["is_support"] is None  # one supporting passage a question: no third label
    assert (
        split(report, "crag", "all")["latency_p95"]
        >= split(report, "crag", "all")["latency_p50"]
        > 0
    )


def test_out_writes_json_markdown_outcomes_and_charts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    report = eval_json(capsys, "--drop-gold", "0.3", "--out", str(out))
    assert json.loads((out / "eval.json").read_text()) == report
    markdown = (out / "eval.md").read_text()
    for heading in ("## Answer accuracy", "## Verdicts", "## Evaluator", "## Cost and latency"):
        assert heading in markdown
    outcomes = [json.loads(line) for line in (out / "outcomes.jsonl").read_text().splitlines()]
    assert len(outcomes) == 20 and {o["system"] for o in outcomes} == {"rag", "crag"}
    pytest.importorskip("matplotlib")
    for chart in ("accuracy.png", "verdicts.png", "latency.png"):
        assert (out / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stricter_answer_scores_are_reported_per_question_and_per_split(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    report = eval_json(capsys, "--drop-gold", "0.5", "--out", str(out))
    outcomes = [json.loads(line) for line in (out / "outcomes.jsonl").read_text().splitlines()]
    for system in ("rag", "crag"):
        mine = [o for o in outcomes if o["system"] == system]
        whole = split(report, system, "all")
        assert whole["first_sentence_accuracy"] == pytest.approx(
            sum(o["first_sentence_correct"] for o in mine) / len(mine)
        )
        assert whole["best_sentence_f1"] == pytest.approx(
            sum(o["best_sentence_f1"] for o in mine) / len(mine)
        )
        # Stricter than the headline: the first sentence is part of the answer.
        assert whole["first_sentence_accuracy"] <= whole["answer_accuracy"]
        assert 0.0 < whole["best_sentence_f1"] < 1.0
    assert all(o["correct"] for o in outcomes if o["first_sentence_correct"])
    markdown = (out / "eval.md").read_text()
    assert "## Stricter answer scores (%)" in markdown
    assert "| crag | first sentence |" in markdown and "| crag | best-sentence F1 |" in markdown


def multi_hop_questions(tmp_path: Path) -> Path:
    """The ten questions, each also supported by the passage of the question after it."""
    rows = [json.loads(line) for line in QUESTIONS.read_text().splitlines()]
    for row, after in zip(rows, rows[1:] + rows[:1]):
        row["support_doc_ids"] = [row["doc_id"], after["doc_id"]]
    path = tmp_path / "multi_hop.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_multi_hop_questions_add_a_supporting_passage_label_to_the_evaluator(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dataset = multi_hop_questions(tmp_path)
    args = ["eval", "--dataset", str(dataset), "--corpus", str(CORPUS), "--drop-gold", "0.5"]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for name in ("all", "gold-present", "gold-dropped"):
        evaluator = split(report, "crag", name)["evaluator"]
        # Every gold chunk supports its question; the second passage adds more.
        assert evaluator["is_support"]["n"] == evaluator["is_gold"]["n"]
        assert evaluator["is_support"]["positives"] > evaluator["is_gold"]["positives"]
    # Only the gold passage leaves the index: what counts as dropped does not change.
    assert report["gold_dropped_questions"] == 5
    assert main(args) == 0
    markdown = capsys.readouterr().out
    for label in ("is the gold passage", "contains an answer", "is a supporting passage"):
        assert f"| {label} |" in markdown


def test_several_web_corpora_are_searched_as_one_web_the_first_copy_of_a_passage_winning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    passages = load_corpus(CORPUS)
    (lighthouse,) = [p for p in passages if p.doc_id == "lighthouse"]
    altered = Passage(lighthouse.doc_id, lighthouse.title, lighthouse.text.replace("1874", "1901"))
    first, second = tmp_path / "web-a.jsonl", tmp_path / "web-b.jsonl"
    write_corpus([altered], first)  # the first file's copy of "lighthouse" is searched
    write_corpus(passages, second)  # every other gold passage is only here
    out = tmp_path / "out"
    web = ["--web-corpus", str(first), "--web-corpus", str(second)]
    report = eval_json(capsys, "--drop-gold", "1.0", "--systems", "crag", *web, "--out", str(out))
    assert report["web_corpora"] == [str(first), str(second)]
    # With no gold passage in the index, every answer comes from the united web.
    assert split(report, "crag", "all")["answer_accuracy"] >= 0.8
    outcomes = [json.loads(line) for line in (out / "outcomes.jsonl").read_text().splitlines()]
    (lit,) = [o for o in outcomes if o["question_id"] == "q01"]
    assert "1901" in lit["answer"] and "1874" not in lit["answer"]
    assert "web search: BM25 over web-a.jsonl + web-b.jsonl." in (out / "eval.md").read_text()


def test_without_json_the_tables_are_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--dataset", str(QUESTIONS), "--corpus", str(CORPUS), "--limit", "4"]) == 0
    out = capsys.readouterr().out
    assert "# crag eval: eval_questions.jsonl" in out and "| rag |" in out and "| crag |" in out


def test_the_same_seed_gives_the_same_report(capsys: pytest.CaptureFixture[str]) -> None:
    def stable(report: dict) -> list:
        return [
            (s["name"], {k: v["answer_accuracy"] for k, v in s["splits"].items()})
            for s in report["systems"]
        ]

    first = eval_json(capsys, "--drop-gold", "0.5", "--seed", "4")
    assert stable(eval_json(capsys, "--drop-gold", "0.5", "--seed", "4")) == stable(first)


def test_a_progress_bar_counts_every_run_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    evaluate(
        EvalOptions(dataset=QUESTIONS, corpus=CORPUS, limit=3), Settings.load(env={}), progress=True
    )
    err = capsys.readouterr().err
    assert "crag eval" in err and "6/6" in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--systems", "rag,oracle"], "Unknown system 'oracle'"),
        (["--systems", "rag,no_such_module:build"], "Cannot load system"),
        (["--drop-gold", "1.5"], "--drop-gold must be a fraction"),
        (["--limit", "0"], "--limit must be positive"),
        (["--concurrency", "0"], "--concurrency must be positive"),
    ],
)
def test_bad_arguments_are_one_clear_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["eval", "--dataset", str(QUESTIONS), "--corpus", str(CORPUS), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error:") and message in err and "Traceback" not in err


def test_a_missing_dataset_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["eval", "--dataset", str(tmp_path / "none.jsonl"), "--corpus", str(CORPUS)]) == 2
    assert "none.jsonl does not exist" in capsys.readouterr().err


@pytest.mark.skipif(
    not (SHARED_DATA / "squad-dev.jsonl").exists(),
    reason="shared data not checked out beside the repo",
)
def test_ten_squad_dev_questions_run_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "eval",
        "--dataset",
        str(SHARED_DATA / "squad-dev.jsonl"),
        "--corpus",
        str(SHARED_DATA / "squad-dev-corpus.jsonl"),
        "--limit",
        "10",
        "--drop-gold",
        "0.5",
        "--json",
    ]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["questions"] == 10 and report["gold_dropped_questions"] == 5
    assert (
        split(report, "crag", "gold-dropped")["answer_accuracy"]
        > split(report, "rag", "gold-dropped")["answer_accuracy"]
    )
