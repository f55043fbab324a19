"""The local reranker (crag.models.onnx_rerank) on a tiny cross-encoder the tests build, laid
out as a Hugging Face ONNX export (support/tiny_cross_encoder.py says how it scores)."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the onnx extra: pip install 'crag-workflows[onnx]'")
pytest.importorskip("onnx", reason="builds the tiny model: the test extra installs it")

from support.tiny_cross_encoder import WORDS, expected_score, tiny_cross_encoder

from crag.errors import ConfigError, RerankError
from crag.interfaces import Reranker, WarmsUp
from crag.models import onnx_rerank
from crag.models.onnx_rerank import OnnxReranker

QUERY = "who wrote dune"
RELEVANT = "who wrote Dune? Frank Herbert wrote the novel Dune"  # all three query words
HALF = "who wrote a recipe for bread"  # two of three
IRRELEVANT = "a recipe for bread: flour, water, salt and yeast"  # none


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_cross_encoder(tmp_path_factory.mktemp("cross_encoder"))


def test_it_is_a_reranker_that_warms_up(model_dir: Path) -> None:
    reranker = OnnxReranker(model_dir)
    assert isinstance(reranker, Reranker) and isinstance(reranker, WarmsUp)


async def test_a_relevant_document_outscores_an_irrelevant_one_in_input_order(model_dir: Path) -> None:
    scores = await OnnxReranker(model_dir).rerank(QUERY, [IRRELEVANT, RELEVANT, HALF])
    assert scores == pytest.approx([expected_score(0), expected_score(1), expected_score(2 / 3)])
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores[1] > 0.99 and scores[0] < 0.01


@pytest.mark.parametrize("layout", ["root", "hub"])
async def test_two_logits_read_as_the_softmax_positive_class(tmp_path: Path, layout: str) -> None:
    two = tiny_cross_encoder(tmp_path / "two", logits=2, layout=layout)
    assert await OnnxReranker(two).rerank(QUERY, [RELEVANT, IRRELEVANT]) == pytest.approx(
        [expected_score(1), expected_score(0)])


async def test_more_documents_than_a_batch_keep_their_order_and_padding_changes_nothing(
    model_dir: Path,
) -> None:
    # 40 documents of different lengths, 16 to a batch: each scores as it does alone.
    documents = [[RELEVANT, IRRELEVANT, HALF][i % 3] + " filler" * i for i in range(40)]
    reranker = OnnxReranker(model_dir, batch_size=16)
    together = await reranker.rerank(QUERY, documents)
    alone = [(await reranker.rerank(QUERY, [d]))[0] for d in documents]
    assert together == pytest.approx(alone)
    assert together == pytest.approx([expected_score([1, 0, 2 / 3][i % 3]) for i in range(40)])


async def test_a_long_document_is_cut_to_max_length(model_dir: Path) -> None:
    # The query's words come only after 100 filler words: past 32 tokens, inside 512.
    late = "filler " * 100 + "who wrote dune"
    assert (await OnnxReranker(model_dir, max_length=32).rerank(QUERY, [late]))[0] == pytest.approx(
        expected_score(0))
    assert (await OnnxReranker(model_dir, max_length=512).rerank(QUERY, [late]))[0] == pytest.approx(
        expected_score(1))


async def test_no_documents_need_no_model(tmp_path: Path) -> None:
    assert await OnnxReranker(tmp_path / "nowhere").rerank(QUERY, []) == []


async def test_the_model_loads_once_off_the_event_loop(model_dir: Path, monkeypatch) -> None:
    loads: list[str] = []
    real_load = onnx_rerank._CrossEncoder.load

    def counted(*args, **kwargs):
        loads.append(threading.current_thread().name)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(onnx_rerank._CrossEncoder, "load", counted)
    reranker = OnnxReranker(model_dir)
    results = await asyncio.gather(*(reranker.rerank(QUERY, [RELEVANT, w]) for w in WORDS[:6]))
    assert len(loads) == 1 and loads[0] != threading.main_thread().name
    assert all(r[0] == pytest.approx(expected_score(1)) for r in results)


def test_a_missing_folder_or_file_says_what_and_how(tmp_path: Path, model_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"No model folder at .*nowhere.*hf download"):
        OnnxReranker(tmp_path / "nowhere").warm_up()
    no_model = tmp_path / "no_model"
    no_model.mkdir()
    (no_model / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    with pytest.raises(ConfigError, match=r"No model\.onnx in .*optimum-cli export onnx"):
        OnnxReranker(no_model).warm_up()
    no_tokenizer = tmp_path / "no_tokenizer"
    no_tokenizer.mkdir()
    (no_tokenizer / "model.onnx").write_bytes((model_dir / "model.onnx").read_bytes())
    with pytest.raises(ConfigError, match=r"No tokenizer\.json in .*no_tokenizer"):
        OnnxReranker(no_tokenizer).warm_up()


def test_a_damaged_file_says_which(tmp_path: Path, model_dir: Path) -> None:
    damaged = tiny_cross_encoder(tmp_path / "damaged")
    (damaged / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(ConfigError, match=r"ONNX Runtime cannot load .*model\.onnx"):
        OnnxReranker(damaged).warm_up()
    (damaged / "model.onnx").write_bytes((model_dir / "model.onnx").read_bytes())
    (damaged / "tokenizer.json").write_text("{", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"tokenizer\.json is not a tokenizers file"):
        OnnxReranker(damaged).warm_up()


def test_a_model_that_is_not_a_cross_encoder_is_refused(tmp_path: Path) -> None:
    odd = tiny_cross_encoder(tmp_path / "odd", extra_input="pixel_values")
    with pytest.raises(ConfigError, match=r"takes \[.*'pixel_values'.*\]; a cross-encoder takes input_ids"):
        OnnxReranker(odd).warm_up()


def test_without_onnxruntime_the_error_says_how_to_install_it(model_dir: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    with pytest.raises(ConfigError, match=r"pip install \"crag-workflows\[onnx\]\""):
        OnnxReranker(model_dir).warm_up()


@pytest.mark.parametrize("option", [{"max_length": 8}, {"batch_size": 0}, {"threads": 0}])
def test_settings_out_of_range_are_refused(model_dir: Path, option: dict) -> None:
    with pytest.raises(ConfigError):
        OnnxReranker(model_dir, **option)


def test_unusable_logits_raise_a_rerank_error() -> None:
    with pytest.raises(RerankError, match="NaN"):
        onnx_rerank.probabilities(np.array([[0.0], [np.nan]]), 2)
    with pytest.raises(RerankError, match="shape"):
        onnx_rerank.probabilities(np.zeros((2, 3)), 2)
    with pytest.raises(RerankError, match="shape"):
        onnx_rerank.probabilities(np.zeros((1, 1)), 2)
    assert onnx_rerank.probabilities(np.array([1000.0, -1000.0]), 2) == [1.0, 0.0]
