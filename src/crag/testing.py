"""Fakes for tests, yours included: a chat model with a set latency, a fixed grader."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback
from llama_index.core.schema import NodeWithScore
from pydantic import Field, PrivateAttr

from crag.events import Grade


class FakeLLM(CustomLLM):
    """A chat model that answers with `reply(prompt)` after sleeping `latency` seconds.

    The async calls sleep with `asyncio.sleep`, so concurrent calls overlap as real
    network calls would; `calls` keeps every prompt received.

    Example:
        llm = FakeLLM(reply=lambda prompt: "9" if "warranty" in prompt else "1", latency=0.05)
    """

    reply: Callable[[str], str] = Field(default=lambda prompt: "OK", exclude=True)
    latency: float = 0.0
    _calls: list[str] = PrivateAttr(default_factory=list)
    _waiting: int = PrivateAttr(default=0)
    _most_waiting: int = PrivateAttr(default=0)

    @property
    def calls(self) -> list[str]:
        return self._calls

    @property
    def peak_in_flight(self) -> int:
        """The most async calls that were waiting on the model at the same moment: what a test
        of concurrency asserts, rather than how long the calls took."""
        return self._most_waiting

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="fake", is_chat_model=True)

    def _answer(self, prompt: str) -> str:
        self._calls.append(prompt)
        return self.reply(prompt)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        time.sleep(self.latency)
        return CompletionResponse(text=self._answer(prompt))

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt)

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self._waiting += 1
        self._most_waiting = max(self._most_waiting, self._waiting)
        try:
            await asyncio.sleep(self.latency)
        finally:
            self._waiting -= 1
        return CompletionResponse(text=self._answer(prompt))

    # The callback decorator emits llama-index's instrumentation events, as real LLMs do,
    # so crag's run trace counts calls to the fake too.
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        text = self.complete(_prompt(messages)).text
        return ChatResponse(message=ChatMessage(role="assistant", content=text))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        text = (await self.acomplete(_prompt(messages))).text
        return ChatResponse(message=ChatMessage(role="assistant", content=text))

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        """The reply a word at a time (each word with the space before it), as a model streams."""
        text = (await self.acomplete(_prompt(messages))).text

        async def words() -> ChatResponseAsyncGen:
            so_far = ""
            for piece in re.findall(r"\s*\S+", text):
                so_far += piece
                yield ChatResponse(message=ChatMessage(role="assistant", content=so_far), delta=piece)

        return words()


def _prompt(messages: Sequence[ChatMessage]) -> str:
    return "\n".join(m.content or "" for m in messages)


class FixedGrader:
    """Grades every chunk with the same score, to force a verdict in tests."""

    name = "fixed"

    def __init__(self, score: float) -> None:
        self.score = score

    async def grade(self, query: str, chunks: Sequence[NodeWithScore]) -> list[Grade]:
        return [Grade(chunk_id=c.node.node_id, score=self.score, grader=self.name) for c in chunks]
