"""Loopback rerank servers speaking each API crag's `HttpReranker` knows, as their documents show it.

`rerank_api(shape)` is a `LoopbackServer` handler for one of: "cohere" (v1), "cohere-v2", "jina",
"vllm", "llamacpp", "infinity", "infinity-old" (its `data` key before `results`) and "tei". Each
scores a (query, document) pair with the same made-up cross-encoder (`logit_of`), answers with
its API's paths, names and extras (ids, usage, meta, echoed documents), sorts by score and honours
`top_n` as the real one does, and refuses a request its API would (400/422, 404 on other paths).

    with LoopbackServer(rerank_api("tei")) as server:
        reranker = HttpReranker(server.url, shape="tei")
"""

from __future__ import annotations

import math
import re
import uuid
from typing import Any

from support.loopback import Reply, Request

# The request example of llama.cpp's README (`POST /reranking`), also Jina's and Cohere's style.
PANDA_QUERY = "What is panda?"
PANDA_DOCUMENTS = [
    "hi",
    "it is a bear",
    ("The giant panda (Ailuropoda melanoleuca), sometimes called a panda bear or simply panda, "
     "is a bear species endemic to China."),
]

PATHS = {
    "cohere": ("/v1/rerank",),
    "cohere-v2": ("/v2/rerank",),
    "jina": ("/v1/rerank",),
    "vllm": ("/rerank", "/v1/rerank", "/v2/rerank"),
    "llamacpp": ("/reranking", "/rerank", "/v1/rerank", "/v1/reranking"),
    "infinity": ("/rerank",),
    "infinity-old": ("/rerank",),
    "tei": ("/rerank",),
}


def logit_of(query: str, document: str) -> float:
    """A cross-encoder's raw logit, made up: words the two share raise it, from -4 for none."""
    words = set(re.findall(r"\w+", query.lower())) - {"what", "is", "a", "the"}
    shared = words & set(re.findall(r"\w+", document.lower()))
    return -4.0 + 5.0 * len(shared) + 0.01 * min(len(document), 100)


def probability_of(query: str, document: str) -> float:
    """The model's sigmoid of `logit_of`, as the servers that apply it answer."""
    return 1.0 / (1.0 + math.exp(-logit_of(query, document)))


def rerank_api(shape: str) -> Any:
    """A handler answering `shape`'s rerank route(s) as documented (see the module's docstring)."""
    paths = PATHS[shape]

    def handle(request: Request) -> Reply:
        if request.method != "POST" or request.path not in paths:
            return Reply(404, {"detail": "Not Found"})
        body = request.json
        if not isinstance(body, dict):
            return Reply(400, {"message": "invalid request: body must be a JSON object"})
        if shape == "tei" or (shape == "llamacpp" and "texts" in body):
            return _tei(body, llamacpp=shape == "llamacpp")
        return _results(shape, body)

    return handle


def _ranked(query: str, documents: list[str], top_n: int | None, score: Any) -> list[dict[str, Any]]:
    ranked = sorted(({"index": i, "score": score(query, d)} for i, d in enumerate(documents)),
                    key=lambda r: r["score"], reverse=True)
    return ranked[:top_n] if top_n else ranked


def _results(shape: str, body: dict[str, Any]) -> Reply:
    query, documents = body.get("query"), body.get("documents")
    if not isinstance(query, str) or not isinstance(documents, list):
        return Reply(422 if shape in ("vllm", "infinity", "infinity-old") else 400,
                     {"message": "query and documents are required"})
    if shape in ("cohere-v2", "jina") and not body.get("model"):
        return Reply(400, {"message": "model is required"})
    texts = [d["text"] if isinstance(d, dict) else d for d in documents]  # Cohere v1, Jina: {text} too
    score = logit_of if shape == "llamacpp" else probability_of  # llama.cpp: the head's raw output
    top_n = body.get("top_n")
    ranked = _ranked(query, texts, top_n if isinstance(top_n, int) else None, score)
    return_documents = body.get("return_documents", shape in ("cohere", "jina"))  # their defaults
    results = []
    for rank in ranked:
        result: dict[str, Any] = {"index": rank["index"], "relevance_score": rank["score"]}
        text = texts[rank["index"]]
        if shape == "vllm":
            result["document"] = {"text": text}  # always echoed
        elif return_documents and shape in ("cohere", "jina"):
            result["document"] = {"text": text}
        elif return_documents and shape.startswith("infinity"):
            result["document"] = text
        results.append(result)
    tokens = sum(len(t.split()) for t in texts) + len(query.split())
    if shape.startswith("cohere"):
        api = {"version": "2" if shape == "cohere-v2" else "1"}
        return Reply(200, {"id": str(uuid.uuid4()), "results": results,
                           "meta": {"api_version": api, "billed_units": {"search_units": 1}}})
    if shape == "jina":
        return Reply(200, {"model": body["model"], "usage": {"total_tokens": tokens}, "results": results})
    if shape.startswith("infinity"):
        key = "data" if shape == "infinity-old" else "results"
        return Reply(200, {"object": "rerank", key: results, "model": body.get("model", "default/not-specified"),
                           "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                           "id": f"infinity-{uuid.uuid4()}", "created": 1700000000})
    return Reply(200, {"id": f"rerank-{uuid.uuid4().hex}", "model": body.get("model", "served-model"),
                       "object": "list", "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                       "results": results})


def _tei(body: dict[str, Any], *, llamacpp: bool) -> Reply:
    query, texts = body.get("query"), body.get("texts")
    if not isinstance(query, str) or not isinstance(texts, list):
        return Reply(422, {"error": "Failed to deserialize the JSON body into the target type: missing field `texts`",
                           "error_type": "Unprocessable Entity"})
    raw = llamacpp or body.get("raw_scores", False)  # llama.cpp's TEI form gives its logits too
    ranked = _ranked(query, texts, None, logit_of if raw else probability_of)
    if body.get("return_text"):
        for rank in ranked:
            rank["text"] = texts[rank["index"]]
    return Reply(200, ranked)
