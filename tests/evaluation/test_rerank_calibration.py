"""`crag calibrate --reranker`: a reranker's thresholds fitted and cross-validated beside the offline evaluator's."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from support.paths import DATA

from crag import ConfigError, Settings
from crag.evaluation.rerank_fit import (
    EVALUATOR,
    RerankCalibration,
    ScoredPairs,
    calibrate_reranker,
    folds_by_question,
    grader_figures,
    table,
    toml_lines,
)

QUESTIONS, CORPUS = DATA / "eval_questions.jsonl", DATA / "eval_corpus.jsonl"
HIT, MISS_BELOW = 0.9, 0.3  # the sharp reranker: a gold chunk scores HIT, any other under MISS_BELOW


def _spread(text: str) -> float:
    """A deterministic number in [0, 1) drawn from `text`."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 2**32


class CountingReranker:
    """Records every request: (query, number of documents)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, int]] = []

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        self.requests.append((query, len(documents)))
        return [self.score(query, d) for d in documents]

    def score(self, query: str, document: str) -> float:
        raise NotImplementedError


class SharpReranker(CountingReranker):
    """Knows each question's gold passage, as a good cross-encoder nearly does."""

    def __init__(self) -> None:
        super().__init__()
        passages = {p["doc_id"]: p["text"] for p in map(json.loads, CORPUS.read_text().splitlines())}
        self.gold = {q["question"]: passages[q["doc_id"]] for q in map(json.loads, QUESTIONS.read_text().splitlines())}

    def score(self, query: str, document: str) -> float:
        return HIT if document.strip()[:60] in self.gold[query] else MISS_BELOW * _spread(document)


class CoinReranker(CountingReranker):
    """Scores at random (deterministically): knows nothing."""

    def score(self, query: str, document: str) -> float:
        return _spread(query + document)


def _calibrated(reranker: CountingReranker) -> RerankCalibration:
    return calibrate_reranker([(QUESTIONS, CORPUS)], Settings.load(env={}), reranker, folds=5)


@pytest.fixture(scope="module")
def sharp() -> tuple[SharpReranker, RerankCalibration]:
    reranker = SharpReranker()
    return reranker, _calibrated(reranker)


def test_a_sharp_reranker_beats_a_random_one_cross_validated(sharp: tuple[SharpReranker, RerankCalibration]) -> None:
    good, poor = sharp[1].reranker, _calibrated(CoinReranker()).reranker
    assert good.balanced_accuracy == 1.0 and good.roc_auc == 1.0
    assert poor.balanced_accuracy is not None and poor.roc_auc is not None
    assert poor.balanced_accuracy < 0.8 and poor.roc_auc < 0.8


def test_thresholds_land_between_the_classes(sharp: tuple[SharpReranker, RerankCalibration]) -> None:
    fitted = sharp[1].reranker
    assert MISS_BELOW < fitted.lower <= fitted.upper <= HIT
    assert all(MISS_BELOW < upper <= HIT for upper in fitted.fold_uppers)
    assert toml_lines(sharp[1]) == f"[reranker]\nupper = {fitted.upper}\nlower = {fitted.lower}"


def test_one_request_per_question_with_all_its_chunks(sharp: tuple[SharpReranker, RerankCalibration]) -> None:
    reranker, result = sharp
    asked = [query for query, _ in reranker.requests]
    assert len(asked) == len(set(asked)) == result.questions == result.rerank_requests == 10
    assert sum(n for _, n in reranker.requests) == result.pairs == 50


def test_the_table_holds_both_graders_on_the_same_pairs(sharp: tuple[SharpReranker, RerankCalibration]) -> None:
    result = sharp[1]
    printed = table(result)
    assert [row.grader for row in result.graders] == ["reranker", EVALUATOR]
    assert "| grader | CV balanced accuracy | ROC AUC | upper | lower |" in printed
    for row in result.graders:
        assert f"| {row.grader} | {100 * row.balanced_accuracy:.1f}% | {row.roc_auc:.3f} | {row.upper} | {row.lower} |" in printed
    assert "5 folds by question; 10 questions, 50 chunks" in printed


def test_folds_never_split_a_question() -> None:
    questions = np.repeat([f"q{i}" for i in range(7)], 5)
    masks = folds_by_question(questions, 3, seed=4)
    assert sum(m.astype(int) for m in masks).tolist() == [1] * len(questions)  # each pair held out once
    for held in masks:
        assert held.any() and not set(questions[held]) & set(questions[~held])
    with pytest.raises(ConfigError, match="--folds"):
        folds_by_question(questions, 8)


def test_cross_validation_judges_each_fold_at_thresholds_fitted_without_it() -> None:
    # Two questions whose gold chunks score far apart: fitted on the other one alone, each
    # question's upper misjudges it; fitted in-sample, both would be told apart perfectly.
    pairs = ScoredPairs(
        question=np.array(["a", "a", "b", "b"]), label=np.array([True, False, True, False]),
        scores={"r": np.array([0.9, 0.8, 0.3, 0.2])},
    )
    figures = grader_figures("r", pairs, k=2)
    assert figures.roc_auc == 0.75  # 0.3 (gold) is below 0.8 (not)
    assert sorted(figures.fold_uppers) == [0.25, 0.85]
    assert figures.balanced_accuracy == 0.5  # a: both below 0.85; b: both above 0.25
    assert (figures.upper, figures.lower) == (0.85, 0.3)  # on every pair: best accuracy, all gold above lower


def test_thresholds_keep_apart_scores_crowded_near_one() -> None:
    # A cross-encoder's sigmoid: relevant 0.9996+, irrelevant 0.9991-; at three decimals upper
    # would round up to 1.0, past every score, and no chunk would ever be Correct.
    pairs = ScoredPairs(
        question=np.repeat(["a", "b", "c", "d"], 2), label=np.tile([True, False], 4),
        scores={"r": np.array([0.9996, 0.9991, 0.9997, 0.9990, 0.9998, 0.9991, 0.9996, 0.9990])},
    )
    figures = grader_figures("r", pairs, k=2)
    assert 0.9991 < figures.lower <= figures.upper <= 0.9996
    assert figures.balanced_accuracy == 1.0


def test_a_reranker_that_breaks_its_promise_stops_the_calibration() -> None:
    class Short(CountingReranker):
        async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
            return [0.5]

    from crag.errors import RerankError

    with pytest.raises(RerankError, match="1 scores for 5 documents"):
        _calibrated(Short())


def test_without_a_reranker_configured_the_command_says_what_to_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from crag.app.cli import main

    (toml := tmp_path / "crag.toml").write_text("[grader]\nkind = \"lexical\"\n")
    args = ["--config", str(toml), "calibrate", "--reranker", "--dataset", str(QUESTIONS), "--corpus", str(CORPUS)]
    assert main(args) != 0
    assert "No reranker to calibrate: set [reranker] base_url" in capsys.readouterr().err


def test_the_command_calibrates_a_rerank_server_and_writes_its_thresholds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from support.loopback import LoopbackServer
    from support.rerank_servers import rerank_api

    from crag.app.cli import main

    toml = tmp_path / "crag.toml"
    with LoopbackServer(rerank_api("vllm")) as server:
        toml.write_text(f'# mine\n[reranker]\nbase_url = "{server.url}"\nshape = "vllm"\n')
        args = ["--config", str(toml), "calibrate", "--reranker", "--folds", "3",
                "--dataset", str(QUESTIONS), "--corpus", str(CORPUS), "--write"]
        assert main(args) == 0
        requests = server.requests_to("/rerank")
    out = capsys.readouterr().out
    assert len(requests) == len(server.requests) == 10  # one per question, nothing else
    assert all(len(r.json["documents"]) == 5 for r in requests)
    assert f"| reranker ({server.url}) | " in out and f"| {EVALUATOR} | " in out
    assert "3 folds by question; 10 questions, 50 chunks" in out
    assert f"wrote [reranker] upper and lower to {toml}" in out
    fitted = Settings.load(toml, env={}).reranker
    assert fitted.base_url == server.url and toml.read_text().startswith("# mine\n")
    assert fitted.upper is not None and fitted.lower is not None and 0.0 <= fitted.lower <= fitted.upper <= 1.0
    assert f"| {fitted.upper} | {fitted.lower} |" in out.split(f"| {EVALUATOR}")[0]
