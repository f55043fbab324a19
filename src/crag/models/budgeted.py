"""A chat model that asks the question's budget before every call: composition, not override.

`BudgetedLLM(llm)` is an `LLM` that hands every call to `llm` unchanged, but first charges it to
the running question's `Budget` (`crag.budget`), which refuses it with `BudgetReached` once the
budget is spent. The wrapped model's own instrumentation still reports each call, so the run's
trace counts calls and tokens once, as the model made them.

The async calls end by the run's deadline (`Budget.deadline`): a call still waiting then, its
retries and their backoff included, is cancelled and raises `DeadlineReached`; a stream is
ended between two pieces. A call that ends without a reply, by the deadline or by an error,
is still counted on the step that made it (`note_unfinished_call`): it was sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

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

from crag.budget import Budget, BudgetReached, DeadlineReached, current_budget
from crag.cost import call_tokens, count_tokens, load_tokenizer
from crag.cost import messages_text as _text
from crag.trace import note_unfinished_call

T = TypeVar("T")


def _charge() -> Budget | None:
    budget = current_budget()
    if budget is not None:
        budget.charge_call()
    return budget


def _spent(response: ChatResponse | CompletionResponse | None, prompt: str) -> None:
    """Count a finished call's tokens against the budget (reported, else counted here)."""
    budget = current_budget()
    if budget is None or response is None:
        return
    reply = response.message.content if isinstance(response, ChatResponse) else response.text
    prompt_tokens, completion_tokens, estimated = call_tokens(
        response.additional_kwargs, lambda: (prompt, str(reply or ""))
    )
    budget.add_tokens(prompt_tokens + completion_tokens, prompt=prompt_tokens, estimated=estimated)


def _unfinished(budget: Budget | None, prompt: str) -> None:
    """A call that ended without a reply: sent, so its prompt is counted, on the step and the budget."""
    note_unfinished_call(prompt)
    if budget is not None:
        tokens = count_tokens(prompt)
        budget.add_tokens(tokens, prompt=tokens, estimated=True)


async def _by_deadline(budget: Budget | None, work: Awaitable[T], prompt: str) -> T:
    """`await work`, ended at the budget's deadline (`DeadlineReached`); a call that ends
    without a reply is counted on the running step."""
    left = budget.time_left() if budget is not None else None
    try:
        if left is None:
            return await work
        return await asyncio.wait_for(work, left)
    except asyncio.TimeoutError:
        assert budget is not None
        budget.stop()
        _unfinished(budget, prompt)
        raise DeadlineReached(f"the run's deadline for model calls ended the call after {left:.1f} s") from None
    except (BudgetReached, DeadlineReached, StopAsyncIteration):  # refused, counted, or a stream's end
        raise
    except Exception:  # a call that failed in any way was sent: counted, then re-raised
        _unfinished(budget, prompt)
        raise


async def _relay(budget: Budget | None, stream: AsyncIterator[T], prompt: str, last: list[Any]) -> AsyncIterator[T]:
    """The stream's pieces, each awaited by the deadline: a model that never stops is ended."""
    try:
        while True:
            try:
                piece = await _by_deadline(budget, stream.__anext__(), prompt)  # type: ignore[arg-type]
            except StopAsyncIteration:
                return
            last[:] = [piece]
            yield piece
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:  # a stream ended early lets its connection go now, not when collected
            try:
                await close()
            except Exception:  # noqa: BLE001 - it failed already; closing it must not hide why
                pass


class BudgetedLLM(LLM):
    """`llm`, with each call charged to the running question's budget before it is made, and
    each async call ended by the run's deadline."""

    llm: LLM = Field(description="The model that answers.")
    max_tokens: int | None = Field(
        default=None, description="The reply-length limit of a chat call that sets none of its own."
    )

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        load_tokenizer()  # its calls count tokens on the event loop: loaded here, not there

    def _limited(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.max_tokens is not None:
            kwargs.setdefault("max_tokens", self.max_tokens)
        return kwargs

    @classmethod
    def class_name(cls) -> str:
        return "BudgetedLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return self.llm.metadata

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        _charge()
        response = self.llm.chat(messages, **self._limited(kwargs))
        _spent(response, _text(messages))
        return response

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        budget = _charge()
        response = await _by_deadline(budget, self.llm.achat(messages, **self._limited(kwargs)), _text(messages))
        _spent(response, _text(messages))
        return response

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        _charge()
        response = self.llm.complete(prompt, formatted=formatted, **kwargs)
        _spent(response, prompt)
        return response

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        budget = _charge()
        response = await _by_deadline(budget, self.llm.acomplete(prompt, formatted=formatted, **kwargs), prompt)
        _spent(response, prompt)
        return response

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        _charge()
        last = None
        for last in self.llm.stream_chat(messages, **self._limited(kwargs)):
            yield last
        _spent(last, _text(messages))

    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        budget = _charge()
        prompt = _text(messages)
        inner = await _by_deadline(budget, self.llm.astream_chat(messages, **self._limited(kwargs)), prompt)

        async def relay() -> ChatResponseAsyncGen:
            last: list[Any] = []
            async for piece in _relay(budget, inner, prompt, last):
                yield piece
            _spent(last[0] if last else None, prompt)

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
        budget = _charge()
        inner = await _by_deadline(budget, self.llm.astream_complete(prompt, formatted=formatted, **kwargs), prompt)

        async def relay() -> CompletionResponseAsyncGen:
            last: list[Any] = []
            async for piece in _relay(budget, inner, prompt, last):
                yield piece
            _spent(last[0] if last else None, prompt)

        return relay()
