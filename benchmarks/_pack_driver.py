"""Times `llama-index-packs-corrective-rag` 0.3.1 on fixed inputs; run inside the pack's venv.

`vs_pack.py` starts this script with the pack's own interpreter (the pack pins
llama-index-core < 0.13, so it cannot share crag's environment), writes a JSON spec on
stdin and reads JSON timings from stdout:

    stdin:  {"latency": 0.05,
             "cases": [{"k": 5, "question": "...", "chunks": [{"id", "title", "text"}, ...],
                        "web_docs": [{"id", "title", "url", "text"}, ...]}, ...]}
    stdout: {"seconds": [...], "llm_calls": [...], "web_searches": [...]}   (one per case)

Before timing, each question runs once untimed (`warmup_cases`); crag's side does the same.

This module also defines the fakes both sides share (`FakeChatLLM`, `reply_for`); they
import only `llama_index.core` names that exist in 0.12 and 0.14, so `vs_pack.py` imports
them in crag's environment too. Everything that needs the pack is imported in `run_cases`.

How the pack is driven (read its `base.py` for the calls replaced here):

* `CorrectiveRAGPack.__init__` runs the workflow's `ingest` step with `asyncio_run`
  outside a loop, building an OpenAI LLM, a `VectorStoreIndex` (OpenAI embeddings) and a
  Tavily client. None of that can run offline, so the pack class is skipped; its
  `CorrectiveRAGWorkflow` is run directly with `query_str=...`, `ingest` then returns None,
  and the objects `ingest` would have put in `ctx.data` are supplied instead:
  the same two `QueryPipeline`s over the pack's own prompts but with the fake LLM, an
  "index" whose retriever returns the case's fixed k chunks, and a fake Tavily tool.
* SHIM: the steps read and write `ctx.data`, a dict the installed engine
  (llama-index-workflows 1.x) no longer has on `Context`. `install_context_data_shim`
  gives `Context` a `data` property: a per-context dict seeded with those components.
  Nothing else in the pack or the engine is changed.
* `Settings.llm` is the fake LLM, so the final `SummaryIndex(...).as_query_engine()` uses it.
* `NLTK_DATA` points at the NLTK data that llama-index-core bundles: left alone, 0.12
  looks in the user's cache and tries to download it when the final step splits sentences.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import PrivateAttr

GRADE_REPLY = "no"  # crag's parse_grade reads 0.0 (Incorrect); the pack web-searches on any "no"
REWRITE_REPLY = "fixed web search query"
ANSWER_REPLY = "A fixed answer drawn from the passages [1]."


def reply_for(prompt: str) -> str:
    """The fake model's reply, chosen by the opening of the prompt (never by passage text).

    crag's grade prompt opens "You grade whether...", the pack's "As a grader, ...";
    crag's rewrite prompt opens "Rewrite the question...", the pack's "Your task is to
    refine a query..."; anything else (both synthesis prompts) gets an answer.
    """
    head = prompt.lstrip()[:60].lower()
    if "grade" in head:
        return GRADE_REPLY
    if head.startswith("rewrite") or "refine a query" in head:
        return REWRITE_REPLY
    return ANSWER_REPLY


class FakeChatLLM(CustomLLM):
    """A chat model that waits `latency` seconds per call, then replies by `reply_for`.

    Async calls wait with `asyncio.sleep` (as a network client would), sync calls with
    `time.sleep`. `calls` counts every call, sync or async.
    """

    latency: float = 0.05
    _calls: int = PrivateAttr(default=0)

    @property
    def calls(self) -> int:
        return self._calls

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            model_name="fake-chat", is_chat_model=True, context_window=32768, num_output=256
        )

    @staticmethod
    def _last_text(messages: Sequence[ChatMessage]) -> str:
        return str(messages[-1].content or "") if messages else ""

    @staticmethod
    def _chat_response(text: str, prompt: str = "") -> ChatResponse:
        # Token counts as an OpenAI-compatible server reports them (here: words), so that
        # neither side has to count tokens itself.
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), additional_kwargs=usage)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self._calls += 1
        time.sleep(self.latency)
        return self._chat_response(reply_for(self._last_text(messages)), self._last_text(messages))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self._calls += 1
        await asyncio.sleep(self.latency)
        return self._chat_response(reply_for(self._last_text(messages)), self._last_text(messages))

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        """The reply as one chunk after `latency`, awaited as a network client streams (CustomLLM's
        own would run the sync `chat`, whose `time.sleep` blocks the event loop)."""
        self._calls += 1
        await asyncio.sleep(self.latency)
        text = reply_for(self._last_text(messages))

        async def chunks() -> Any:
            response = self._chat_response(text, self._last_text(messages))
            response.delta = text
            yield response

        return chunks()

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self._calls += 1
        time.sleep(self.latency)
        return CompletionResponse(text=reply_for(prompt))

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        self._calls += 1
        await asyncio.sleep(self.latency)
        return CompletionResponse(text=reply_for(prompt))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        response = self.complete(prompt, formatted=formatted, **kwargs)

        def gen() -> CompletionResponseGen:
            yield CompletionResponse(text=response.text, delta=response.text)

        return gen()


def warmup_cases(cases: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Untimed warm-up runs: every question once, at the smallest k.

    One per question, not one in all: some first-use costs (e.g. the pack's sentence
    splitter loading Punkt) only appear with the text of a later question.
    """
    smallest = min((c["k"] for c in cases), default=0)
    return [c for c in cases if c["k"] == smallest]


def install_context_data_shim(components: dict[str, Any]) -> None:
    """SHIM: give the engine's `Context` the `data` dict the pack's steps expect.

    Each context gets its own dict, seeded on first access with a copy of `components`
    (what the pack's `ingest` step would have stored). Change `components` between runs
    to change what the next run sees.
    """
    from llama_index.core.workflow import Context

    def data(self: Any) -> dict[str, Any]:
        if "_shim_data" not in self.__dict__:
            self.__dict__["_shim_data"] = dict(components)
        return self.__dict__["_shim_data"]

    Context.data = property(data)  # type: ignore[attr-defined]


async def run_cases(spec: dict[str, Any]) -> dict[str, list[float] | list[int]]:
    """Run the pack's workflow once per case, after the untimed warm-up runs."""
    from llama_index.core import Document, Settings
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.query_pipeline.query import QueryPipeline
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from llama_index.packs.corrective_rag.base import (
        DEFAULT_RELEVANCY_PROMPT_TEMPLATE,
        DEFAULT_TRANSFORM_QUERY_TEMPLATE,
        CorrectiveRAGWorkflow,
    )

    class FixedRetriever(BaseRetriever):
        """Returns the same nodes for every query (the case's k chunks)."""

        def __init__(self, nodes: list[NodeWithScore]) -> None:
            super().__init__()
            self._nodes = nodes

        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            return list(self._nodes)

    class FixedIndex:
        """Stands in for the pack's VectorStoreIndex: only `as_retriever` is called."""

        def __init__(self, nodes: list[NodeWithScore]) -> None:
            self.nodes = nodes

        def as_retriever(self, **kwargs: Any) -> BaseRetriever:
            return FixedRetriever(self.nodes)

    class FakeTavily:
        """Stands in for TavilyToolSpec: fixed documents, no network."""

        def __init__(self) -> None:
            self.docs: list[dict[str, str]] = []  # set per case
            self.searches = 0

        def search(self, query: str, max_results: int = 6) -> list[Document]:
            self.searches += 1
            return [
                Document(text=d["text"], extra_info={"url": d["url"]})
                for d in self.docs[:max_results]
            ]

    import llama_index.core

    # llama-index-core 0.12 reads its NLTK data from $NLTK_DATA/_static/nltk_cache, which
    # is where the package bundles it; otherwise it downloads into the user's cache.
    os.environ.setdefault("NLTK_DATA", os.path.dirname(llama_index.core.__file__))

    llm = FakeChatLLM(latency=float(spec["latency"]))
    Settings.llm = llm
    tavily = FakeTavily()
    components: dict[str, Any] = {
        "llm": llm,
        "relevancy_pipeline": QueryPipeline(chain=[DEFAULT_RELEVANCY_PROMPT_TEMPLATE, llm]),
        "transform_query_pipeline": QueryPipeline(chain=[DEFAULT_TRANSFORM_QUERY_TEMPLATE, llm]),
        "tavily_tool": tavily,
    }
    install_context_data_shim(components)
    workflow = CorrectiveRAGWorkflow(timeout=600)

    async def run_one(case: dict[str, Any]) -> tuple[float, int, int]:
        nodes = [
            NodeWithScore(
                node=TextNode(id_=c["id"], text=c["text"], metadata={"title": c["title"]}),
                score=1.0,
            )
            for c in case["chunks"]
        ]
        components["index"] = FixedIndex(nodes)
        tavily.docs = case["web_docs"]
        calls, searches = llm.calls, tavily.searches
        started = time.perf_counter()
        await workflow.run(query_str=case["question"])
        seconds = time.perf_counter() - started
        return seconds, llm.calls - calls, tavily.searches - searches

    cases = spec["cases"]
    for case in warmup_cases(cases):
        await run_one(case)
    out: dict[str, list] = {"seconds": [], "llm_calls": [], "web_searches": []}
    for case in cases:
        seconds, calls, searches = await run_one(case)
        out["seconds"].append(seconds)
        out["llm_calls"].append(calls)
        out["web_searches"].append(searches)
    return out


def main() -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore")  # the pack's old stack warns about deprecations on import
    logging.disable(logging.WARNING)
    spec = json.load(sys.stdin)
    result = asyncio.run(run_cases(spec))
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
