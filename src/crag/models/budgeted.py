"""A chat model that asks the question's budget before every call: composition, not override.

`BudgetedLLM(llm)` is an `LLM` that hands every call to `llm` unchanged, but first charges it to
the running question's `Budget` (`crag.budget`), which refuses it with `BudgetReached` once the
budget is spent. The wrapped model's own instrumentation still reports each call, so the run's
trace counts calls and tokens once, as the model made them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms.llm import LLM
from pydantic import Field

from crag.budget import current_budget
from crag.cost import call_tokens
from crag.cost import messages_text as _text


def _charge() -> None:
    budget = current_budget()
    if budget is not None:
        budget.charge_call()


def _spent(response: ChatResponse | CompletionResponse | None, prompt: str) -> None:
    """Count a finished call's tokens against the budget (reported, else counted here)."""
    budget = current_budget()
    if budget is None or response is None:
        return
    reply = response.message.content if isinstance(response, ChatResponse) else response.text
    prompt_tokens, completion_tokens, _ = call_tokens(response.additional_kwargs, lambda: (prompt, str(reply or "")))
    budget.add_tokens(prompt_tokens + completion_tokens)


class BudgetedLLM(LLM):
    """`llm`, with each call charged to the running question's budget before it is made."""

    llm: LLM = Field(description="The model that answers.")

    @classmethod
    def class_name(cls) -> str:
        return "BudgetedLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return self.llm.metadata

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        _charge()
        response = self.llm.chat(messages, **kwargs)
        _spent(response, _text(messages))
        return response

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        _charge()
        response = await self.llm.achat(messages, **kwargs)
        _spent(response, _text(messages))
        return response

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        _charge()
        response = self.llm.complete(prompt, formatted=formatted, **kwargs)
        _spent(response, prompt)
        return response

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        _charge()
        response = await self.llm.acomplete(prompt, formatted=formatted, **kwargs)
        _spent(response, prompt)
        return response

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        _charge()
        last = None
        for last in self.llm.stream_chat(messages, **kwargs):
            yield last
        _spent(last, _text(messages))

    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        _charge()
        inner = await self.llm.astream_chat(messages, **kwargs)

        async def relay() -> ChatResponseAsyncGen:
            last = None
            async for last in inner:
                yield last
            _spent(last, _text(messages))

        return relay()

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        _charge()
        last = None
        for last in self.llm.stream_complete(prompt, formatted=formatted, **kwargs):
            yield last
        _spent(last, prompt)

    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        _charge()
        inner = await self.llm.astream_complete(prompt, formatted=formatted, **kwargs)

        async def relay() -> CompletionResponseAsyncGen:
            last = None
            async for last in inner:
                yield last
            _spent(last, prompt)

        return relay()
