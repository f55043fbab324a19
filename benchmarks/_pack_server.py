"""`llama-index-packs-corrective-rag` 0.3.1 behind one HTTP endpoint; runs in the pack's venv.

    benchmarks/.venv-pack/bin/python benchmarks/_pack_server.py \
        --port 8123 --llm-url http://127.0.0.1:PORT --corpus corpus.jsonl --top-k 5

`throughput.py` starts it. It is a harness, not a framework: uvicorn + Starlette, one
route, `POST /query {"query": "..."}`, which awaits one run of the pack's
`CorrectiveRAGWorkflow` on the server's event loop and answers `{"answer": "..."}` (or
HTTP 500 `{"error": "..."}`); `GET /health` answers once the index is built.

The pack's components are the ones its `ingest` step builds, pointed at the loopback
fake (`--llm-url`), because the pack class itself cannot run offline or on the installed
engine (see `_pack_driver.py`, whose `Context.data` shim this reuses):

* LLM: the pack's `OpenAI(model="gpt-4")` with `api_base` = the fake's `/v1`, in its two
  `QueryPipeline`s over the pack's own prompts, and as `Settings.llm` for the final
  `SummaryIndex` query engine. Every model call is a real HTTP round trip.
* Web search: the pack's `TavilyToolSpec`, its client's `base_url` set to the fake's
  `/search` (tavily-python 0.3.9 has no constructor argument for it).
* Index: the pack's `VectorStoreIndex` over `--corpus`, with `HashingEmbedding` below:
  the pack embeds with OpenAI, whose package its requirements do not even pull in, and
  no local model is installed in its venv. Retrieved with `similarity_top_k=--top-k`.

The pack's steps call the model with blocking (sync) calls inside `async` steps, so
concurrent requests on this one event loop take turns; that is the pack as written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _pack_driver import install_context_data_shim  # noqa: E402 - shared shim

DIMENSIONS = 256


class HashingEmbedding(BaseEmbedding):
    """Local bag-of-words vectors: each lower-cased word hashed to one of 256 dimensions,
    unit length. Deterministic, no model, no network."""

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * DIMENSIONS
        for word in re.findall(r"\w+", text.lower()):
            vector[int(hashlib.md5(word.encode()).hexdigest()[:8], 16) % DIMENSIONS] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)


def build_workflow(llm_url: str, corpus: Path, timeout: float) -> Any:
    """The pack's workflow with the components its `ingest` step would store in `ctx.data`."""
    import llama_index.core
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.query_pipeline.query import QueryPipeline
    from llama_index.llms.openai import OpenAI
    from llama_index.packs.corrective_rag.base import (
        DEFAULT_RELEVANCY_PROMPT_TEMPLATE,
        DEFAULT_TRANSFORM_QUERY_TEMPLATE,
        CorrectiveRAGWorkflow,
    )
    from llama_index.tools.tavily_research.base import TavilyToolSpec

    # llama-index-core 0.12 finds its bundled NLTK data only through NLTK_DATA; without
    # it the final step's sentence splitter tries to download Punkt.
    os.environ.setdefault("NLTK_DATA", os.path.dirname(llama_index.core.__file__))

    llm = OpenAI(model="gpt-4", api_base=f"{llm_url}/v1", api_key="sk-fake-pack")
    Settings.llm = llm
    Settings.embed_model = HashingEmbedding()
    with corpus.open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    documents = [
        Document(id_=r["doc_id"], text=r["text"], metadata={"title": r["title"]}) for r in rows
    ]
    tavily = TavilyToolSpec(api_key="tvly-fake-pack")
    tavily.client.base_url = f"{llm_url}/search"
    install_context_data_shim(
        {
            "llm": llm,
            "relevancy_pipeline": QueryPipeline(chain=[DEFAULT_RELEVANCY_PROMPT_TEMPLATE, llm]),
            "transform_query_pipeline": QueryPipeline(
                chain=[DEFAULT_TRANSFORM_QUERY_TEMPLATE, llm]
            ),
            "index": VectorStoreIndex.from_documents(documents),
            "tavily_tool": tavily,
        }
    )
    return CorrectiveRAGWorkflow(timeout=timeout)


def make_app(workflow: Any, top_k: int) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def query(request: Request) -> JSONResponse:
        body = await request.json()
        question = body.get("query") if isinstance(body, dict) else None
        if not isinstance(question, str) or not question.strip():
            return JSONResponse({"error": 'expected {"query": "<question>"}'}, status_code=400)
        try:
            result = await workflow.run(
                query_str=question, retriever_kwargs={"similarity_top_k": top_k}
            )
        except Exception as exc:  # noqa: BLE001 - reported to the client, which counts it
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)
        return JSONResponse({"answer": str(result)})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[Route("/query", query, methods=["POST"]), Route("/health", health)]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--llm-url", required=True, help="the fake server, no trailing slash")
    parser.add_argument("--corpus", type=Path, required=True, help='JSONL {"doc_id","title","text"}')
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per workflow run")
    args = parser.parse_args()

    import uvicorn

    warnings.filterwarnings("ignore")  # the pack's old stack warns about deprecations on import
    logging.disable(logging.WARNING)
    workflow = build_workflow(args.llm_url, args.corpus, args.timeout)
    uvicorn.run(
        make_app(workflow, args.top_k), host="127.0.0.1", port=args.port, log_level="warning"
    )


if __name__ == "__main__":
    main()
