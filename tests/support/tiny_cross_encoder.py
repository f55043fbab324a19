"""A cross-encoder small enough to build in a test, laid out as a Hugging Face ONNX export.

`tiny_cross_encoder(folder)` writes `tokenizer.json` (a `tokenizers` WordLevel tokenizer with
BERT's pair template: [CLS] query [SEP] document [SEP], token types 0 then 1) and
`model.onnx` (built with `onnx.helper`), whose logit is predictable: an identity embedding
looks each token up, the attention mask and token types sum the query's and the document's
tokens into two bags of words, and a linear layer scores the share of the query's words the
document holds: `12 * share - 6`. A document with all of the query's words scores
sigmoid(6) ~ 0.998, one with none sigmoid(-6) ~ 0.002, one with half 0.5.

Needs the `onnx` package (the test extra), imported when called.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

WORDS = ("who", "wrote", "dune", "frank", "herbert", "the", "novel", "a", "recipe", "for", "bread",
         "flour", "water", "salt", "yeast", "bake", "oven", "filler")
SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
VOCAB = {token: i for i, token in enumerate(SPECIAL + WORDS)}
WEIGHT, BIAS = 12.0, -6.0


def expected_score(share: float) -> float:
    """The model's probability for a document holding `share` of the query's words."""
    return float(1.0 / (1.0 + np.exp(-(WEIGHT * share + BIAS))))


def tiny_cross_encoder(
    folder: Path, *, logits: int = 1, extra_input: str | None = None, layout: str = "root",
) -> Path:
    """Write the tokenizer and the model into `folder`; returns `folder`.

    Args:
        logits: 1 (one relevance logit) or 2 (not relevant, relevant: a classifier's layout).
        extra_input: a further declared input, for a model that is not a plain cross-encoder.
        layout: "root" (model.onnx beside tokenizer.json) or "hub" (onnx/model.onnx).
    """
    folder.mkdir(parents=True, exist_ok=True)
    write_tokenizer(folder / "tokenizer.json")
    model_path = folder / "model.onnx" if layout == "root" else folder / "onnx" / "model.onnx"
    model_path.parent.mkdir(exist_ok=True)
    model_path.write_bytes(model_bytes(logits=logits, extra_input=extra_input))
    return folder


def write_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    tokenizer = Tokenizer(WordLevel(VOCAB, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", VOCAB["[CLS]"]), ("[SEP]", VOCAB["[SEP]"])],
    )
    tokenizer.enable_padding(pad_id=VOCAB["[PAD]"], pad_token="[PAD]")  # as exports often save it
    tokenizer.save(str(path))
    json.loads(path.read_text(encoding="utf-8"))  # a file the reranker can read back


def model_bytes(*, logits: int = 1, extra_input: str | None = None) -> bytes:
    """The serialized ONNX graph (see the module's docstring)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    size = len(VOCAB)
    embedding = np.eye(size, dtype=np.float32)
    # [UNK], [CLS] and [SEP] are no one's words; [PAD] keeps its own, so that only the
    # attention mask keeps padding out of the query's bag (a model that needs the mask).
    embedding[1: len(SPECIAL)] = 0.0
    constants = [
        numpy_helper.from_array(embedding, "embedding"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis_1"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
        numpy_helper.from_array(np.array([[WEIGHT]], dtype=np.float32), "weight"),
        numpy_helper.from_array(np.array([BIAS], dtype=np.float32), "bias"),
        numpy_helper.from_array(np.zeros((1, 1), dtype=np.float32), "zero_column"),
    ]
    node = helper.make_node
    nodes = [
        node("Gather", ["embedding", "input_ids"], ["embedded"], axis=0),  # (batch, tokens, vocab)
        node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        node("Cast", ["token_type_ids"], ["types"], to=TensorProto.FLOAT),
        node("Mul", ["mask", "types"], ["document_mask"]),
        node("Sub", ["mask", "document_mask"], ["query_mask"]),
        *bag("query", node), *bag("document", node),
        # Share of the query's words in the document: sum(q * d) / max(sum(q), 1).
        node("Mul", ["query_present", "document_present"], ["both"]),
        node("ReduceSum", ["both", "axis_1"], ["shared"], keepdims=1),  # (batch, 1)
        node("ReduceSum", ["query_present", "axis_1"], ["query_words"], keepdims=1),
        node("Max", ["query_words", "one"], ["denominator"]),
        node("Div", ["shared", "denominator"], ["share"]),
        node("Gemm", ["share", "weight", "bias"], ["relevance"]),  # (batch, 1): the linear layer
    ]
    if logits == 2:  # softmax([0, r])'s second class is sigmoid(r)
        nodes += [node("Mul", ["relevance", "zero_column"], ["zeros"]),
                  node("Concat", ["zeros", "relevance"], ["logits"], axis=1)]
    else:
        nodes.append(node("Identity", ["relevance"], ["logits"]))
    names = ["input_ids", "attention_mask", "token_type_ids"] + ([extra_input] if extra_input else [])
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"]) for n in names]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", logits])]
    graph = helper.make_graph(nodes, "tiny_cross_encoder", inputs, outputs, initializer=constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # readable by every ONNX Runtime the extra allows
    onnx.checker.check_model(model)
    return model.SerializeToString()


def bag(part: str, node) -> list:
    """Nodes turning `{part}_mask` and the embedded tokens into `{part}_present` (batch, vocab):
    1 for each word the part holds (a masked matmul: the mean's sum, capped at one)."""
    return [
        node("Unsqueeze", [f"{part}_mask", "axis_1"], [f"{part}_row"]),  # (batch, 1, tokens)
        node("MatMul", [f"{part}_row", "embedded"], [f"{part}_counts_3d"]),  # (batch, 1, vocab)
        node("Squeeze", [f"{part}_counts_3d", "axis_1"], [f"{part}_counts"]),
        node("Min", [f"{part}_counts", "one"], [f"{part}_present"]),
    ]
