"""A cross-encoder on this machine: ONNX Runtime over a model folder the user names.

Needs the `onnx` extra (`pip install "crag-workflows[onnx]"`: ONNX Runtime, kept out of the
default install). The folder holds a Hugging Face ONNX export: `model.onnx` (or
`onnx/model.onnx`, as exports on the Hub lay it out) and `tokenizer.json`. Nothing is ever
downloaded here: getting the folder is the user's one explicit step (docs/guide/settings.md).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from crag._offload import off_loop
from crag.errors import ConfigError, RerankError

INSTALL_HINT = 'pip install "crag-workflows[onnx]"'
GET_A_MODEL = ("e.g. hf download cross-encoder/ms-marco-MiniLM-L6-v2 onnx/model.onnx tokenizer.json "
               "--local-dir DIR")
# The inputs a BERT-style (input_ids, attention_mask, token_type_ids) or XLM-RoBERTa-style
# (no token_type_ids) cross-encoder declares; the tokenizer gives each of them.
KNOWN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
INTEGER_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}


class OnnxReranker:
    """A cross-encoder (ms-marco MiniLM, bge-reranker, ...) run by ONNX Runtime on the CPU.

    Scores are probabilities of relevance: the sigmoid of a single-logit model's output, or
    the softmax's positive class (the second) of a two-logit one; in the documents' order.
    The model loads in `warm_up()` (`build_workflow` calls it), or once on first use.

    Args:
        model_dir: the folder with `model.onnx` (or `onnx/model.onnx`) and `tokenizer.json`.
        max_length: tokens per (query, document) pair; the longer of the two is cut first,
            as sentence-transformers' CrossEncoder does. At most the model's own limit (512
            for BERT-style models).
        batch_size: pairs per inference call: memory grows with batch_size * max_length.
        threads: ONNX Runtime's threads per call; None leaves its default (one per core).

    Example:
        reranker = OnnxReranker(Path("models/ms-marco-MiniLM-L6-v2"))
        scores = await reranker.rerank("who wrote Dune?", ["Frank Herbert wrote Dune.", "..."])
    """

    def __init__(
        self, model_dir: Path | str, *, max_length: int = 512, batch_size: int = 16,
        threads: int | None = None,
    ) -> None:
        if max_length < 16:
            raise ConfigError(f"max_length must be at least 16 tokens, not {max_length}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, not {batch_size}")
        if threads is not None and threads < 1:
            raise ConfigError(f"threads must be at least 1 (or None: ONNX Runtime's default), not {threads}")
        self.model_dir = Path(model_dir).expanduser()
        self.max_length = max_length
        self.batch_size = batch_size
        self.threads = threads
        self._model: _CrossEncoder | None = None
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        """Load the model and tokenizer now; `ConfigError` if the folder or the extra is wrong."""
        self._load()

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        if not documents:
            return []
        return await off_loop(self.scores, query, list(documents))

    def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        """`rerank`'s scores, computed on the calling thread (CPU-bound: keep it off the loop)."""
        model = self._load()
        scores: list[float] = []
        for start in range(0, len(documents), self.batch_size):
            scores += model.score(query, documents[start: start + self.batch_size])
        return scores

    def _load(self) -> _CrossEncoder:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = _CrossEncoder.load(self.model_dir, self.max_length, self.threads)
        return self._model


@dataclass(frozen=True)
class _CrossEncoder:
    session: Any  # onnxruntime.InferenceSession
    tokenizer: Any  # tokenizers.Tokenizer, truncating, not padding
    inputs: dict[str, type[np.integer]]  # the model's declared inputs and their integer type
    output: str
    pad_id: int

    @classmethod
    def load(cls, folder: Path, max_length: int, threads: int | None) -> _CrossEncoder:
        model_path, tokenizer_path = model_files(folder)
        try:
            import onnxruntime
        except ImportError as exc:
            raise ConfigError(f"The ONNX reranker needs ONNX Runtime, which is not installed: "
                              f"{INSTALL_HINT}") from exc
        from tokenizers import Tokenizer

        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
            raise ConfigError(f"{tokenizer_path} is not a tokenizers file ({exc}); "
                              f"use the tokenizer.json saved with the model") from exc
        pad_id = (tokenizer.padding or {}).get("pad_id")
        if pad_id is None:
            pad_id = next((i for t in ("[PAD]", "<pad>") if (i := tokenizer.token_to_id(t)) is not None), 0)
        tokenizer.no_padding()  # padded below, to the batch's longest pair
        tokenizer.enable_truncation(max_length, strategy="longest_first")

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only: its warnings about a graph are not the user's
        # Its threads would spin between calls, on cores the event loop and other runs need; a
        # question is one call (a batch or a few), not a tight loop that spinning would speed up.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        try:
            session = onnxruntime.InferenceSession(
                str(model_path), sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ONNX Runtime's errors derive from Exception, one class per status
            raise ConfigError(f"ONNX Runtime cannot load {model_path} ({exc}); export the "
                              f"cross-encoder again, {GET_A_MODEL}") from exc
        inputs = declared_inputs(session, model_path)
        outputs = [o.name for o in session.get_outputs()]
        output = "logits" if "logits" in outputs else outputs[0]
        return cls(session, tokenizer, inputs, output, int(pad_id))

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        encodings = self.tokenizer.encode_batch([(query, document) for document in documents])
        width = max(len(e.ids) for e in encodings)
        tokens = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in KNOWN_INPUTS}
        tokens["input_ids"].fill(self.pad_id)
        for row, e in enumerate(encodings):
            tokens["input_ids"][row, : len(e.ids)] = e.ids
            tokens["attention_mask"][row, : len(e.ids)] = e.attention_mask
            tokens["token_type_ids"][row, : len(e.ids)] = e.type_ids
        feed = {name: tokens[name].astype(kind, copy=False) for name, kind in self.inputs.items()}
        try:
            (logits,) = self.session.run([self.output], feed)
        except Exception as exc:  # ONNX Runtime's errors derive from Exception, one class per status
            raise RerankError(f"the ONNX cross-encoder failed ({exc}); a max_length past the "
                              f"model's own limit fails so") from exc
        return probabilities(np.asarray(logits, dtype=np.float64), len(documents))


def model_files(folder: Path) -> tuple[Path, Path]:
    """The folder's model.onnx (or onnx/model.onnx) and tokenizer.json; `ConfigError` naming
    what is missing and how to get it."""
    if not folder.is_dir():
        raise ConfigError(f"No model folder at {folder}: download a cross-encoder's ONNX export "
                          f"there once ({GET_A_MODEL}) and set [reranker] model_dir to it")
    model = next((p for p in (folder / "model.onnx", folder / "onnx" / "model.onnx") if p.is_file()), None)
    if model is None:
        raise ConfigError(f"No model.onnx in {folder} nor in {folder / 'onnx'}: download the "
                          f"model's ONNX export ({GET_A_MODEL}), or export it with optimum: "
                          f"optimum-cli export onnx --model MODEL_ID --task text-classification {folder}")
    tokenizer = folder / "tokenizer.json"
    if not tokenizer.is_file():
        raise ConfigError(f"No tokenizer.json in {folder}: download it with the model ({GET_A_MODEL})")
    return model, tokenizer


def declared_inputs(session: Any, model_path: Path) -> dict[str, type[np.integer]]:
    """The model's inputs and their integer types; `ConfigError` for a model that is not a
    tokenized cross-encoder (no input_ids, an input the tokenizer cannot give)."""
    declared = {i.name: i.type for i in session.get_inputs()}
    unknown = sorted(set(declared) - set(KNOWN_INPUTS))
    if "input_ids" not in declared or unknown:
        raise ConfigError(f"{model_path} takes {sorted(declared)}; a cross-encoder takes input_ids "
                          f"(with attention_mask, token_type_ids): export it for text-classification")
    wrong = {name: kind for name, kind in declared.items() if kind not in INTEGER_TYPES}
    if wrong:
        raise ConfigError(f"{model_path}'s inputs must be integer token ids, not {wrong}")
    return {name: INTEGER_TYPES[kind] for name, kind in declared.items()}


def probabilities(logits: np.ndarray, count: int) -> list[float]:
    """A probability of relevance per row: sigmoid of one logit, or of (positive - negative) for
    two, which is the softmax's positive class; `RerankError` for any other shape or a NaN."""
    if logits.ndim == 1:
        logits = logits[:, None]
    if logits.ndim != 2 or logits.shape[0] != count or logits.shape[1] not in (1, 2):
        raise RerankError(f"the ONNX cross-encoder gave logits of shape {logits.shape} for {count} "
                          f"documents; a reranker gives one or two per document")
    margin = logits[:, 0] if logits.shape[1] == 1 else logits[:, 1] - logits[:, 0]
    if not np.all(np.isfinite(margin)):
        raise RerankError("the ONNX cross-encoder gave a NaN or infinite logit")
    return (0.5 * (1.0 + np.tanh(margin / 2.0))).tolist()  # the sigmoid, without overflow
