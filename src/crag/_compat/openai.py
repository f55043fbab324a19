"""Private parts of the openai SDK and of llama-index's OpenAI classes that crag's model client uses
(written against openai 2.54.0 and llama-index-llms-openai 0.8.3).

llama-index's `OpenAI` builds its clients and reads replies in private methods; crag replaces
four of them (`_get_credential_kwargs`, `_get_client`, `_get_aclient`, `_achat`) to set the
SDK's retries, keep one async client per event loop, bound the requests in flight, and read
a text reply straight from its JSON; and the SDK's `_make_status_error` to keep API keys out
of HTTP errors. `tests/test_private_api.py` checks each of them exists as used here.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Sequence
from contextlib import ExitStack
from functools import cache
from typing import Any

from llama_index.core.llms import ChatMessage, ChatResponse, TextBlock
from pydantic import Field, PrivateAttr

from crag.errors import ModelReplyError, redact, scrub

__all__ = ["default_connection_limits", "checked_classes", "plain_text", "reported_usage"]


def default_connection_limits() -> Any:
    """The openai SDK's own connection limits for its HTTP client (imported late: the SDK is big)."""
    from openai._constants import DEFAULT_CONNECTION_LIMITS

    return DEFAULT_CONNECTION_LIMITS


class _CheckedReplies:
    """Chat replies that are usable or a clear error; HTTP errors free of API keys; at
    most `_max_in_flight` requests at once.

    Mixed into llama-index's OpenAI classes; the openai client gets `_client_retries`.
    """

    def set_client_limits(self, *, retries: int, max_in_flight: int, new_http_client: Any) -> None:
        """The openai client's retries, the requests in flight at once (per event loop), and
        what makes each async client's HTTP client."""
        self._client_retries = retries
        self._max_in_flight = max_in_flight
        self._new_http_client = new_http_client

    def _in_flight(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        limits: weakref.WeakKeyDictionary = self._limits  # type: ignore[attr-defined]
        if loop not in limits:
            limits[loop] = asyncio.Semaphore(self._max_in_flight)  # type: ignore[attr-defined]
        return limits[loop]

    def _get_credential_kwargs(self, is_async: bool = False) -> dict[str, Any]:
        kwargs = super()._get_credential_kwargs(is_async)  # type: ignore[misc]
        kwargs["max_retries"] = self._client_retries
        return kwargs

    def _get_client(self) -> Any:
        if self._client is None or not self.reuse_client:  # type: ignore[attr-defined]
            client = _scrubbing_clients()[0](**self._get_credential_kwargs())
            if not self.reuse_client:  # type: ignore[attr-defined]
                return client
            self._client = client
        return self._client

    def _get_aclient(self) -> Any:
        """One async client per event loop, each with its own connection pools.

        llama-index keeps one for the model's life, but `workflow.ask()` (and a notebook,
        and pytest) runs each call on a fresh loop: connections opened on a closed loop
        cannot be reused, and openai's pool wrapper, when collected later, schedules its
        close on whatever loop runs then, which fails ("Task exception was never
        retrieved: Event loop is closed"). The plain pools used here have no such finaliser.
        """
        try:
            loop: Any = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        clients: dict = self._aclients  # type: ignore[attr-defined]
        for finished in [other for other in clients if other.is_closed()]:
            del clients[finished]  # its sockets close when collected; they cannot be used again
        client = clients.get(loop) if loop is not None else None
        if client is None or not self.reuse_client:  # type: ignore[attr-defined]
            kwargs = self._get_credential_kwargs(is_async=True)
            kwargs["http_client"] = kwargs.get("http_client") or self._new_http_client()  # type: ignore[attr-defined]
            client = _scrubbing_clients()[1](**kwargs)
            if loop is not None and self.reuse_client:  # type: ignore[attr-defined]
                clients[loop] = client
        return client

    async def _achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """llama-index's call, less two passes of the openai SDK that cost CPU on every call:
        `chat.completions.create` "transforms" the body over its typed dicts (for text chat
        messages it changes nothing), and the reply is built into typed models. The same body
        goes to the same path through the same client, with its retries, timeouts and errors;
        a reply that is text only (what crag asks for) becomes the same `ChatMessage` straight
        from its JSON, anything else (tool calls, audio, reasoning, logprobs) goes through the
        SDK's models and llama-index's conversion as before. `raw` is the reply's JSON.
        It cuts the client's CPU per call by about a quarter (benchmarks/model_client.py).
        """
        import httpx
        from llama_index.llms.openai.utils import (
            from_openai_message,
            from_openai_token_logprobs,
            to_openai_message_dicts,
        )

        body = {
            "messages": to_openai_message_dicts(messages, model=self.model),  # type: ignore[attr-defined]
            "stream": False,
            **self._get_model_kwargs(**kwargs),  # type: ignore[attr-defined]
        }
        reply = await self._get_aclient().post("/chat/completions", body=body, cast_to=httpx.Response)
        data = reply.json()
        choice = data["choices"][0]
        found = choice["message"]
        usage = reported_usage(data)
        if plain_text(choice, found):
            text = found.get("content")
            blocks = [TextBlock(text=text)] if text else []
            message = ChatMessage(role=found.get("role") or "assistant", blocks=blocks)
            return ChatResponse(message=message, raw=data, additional_kwargs=usage)
        completion = _chat_completion_type().construct(**data)
        choice = completion.choices[0]
        modalities = self.modalities or ["text"]  # type: ignore[attr-defined]
        logprobs = None
        if choice.logprobs and choice.logprobs.content:
            logprobs = from_openai_token_logprobs(choice.logprobs.content)
        return ChatResponse(
            message=from_openai_message(choice.message, modalities=modalities),
            raw=data,
            logprobs=logprobs,
            additional_kwargs=usage,
        )

    async def _model_achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return await super().achat(messages, **kwargs)  # type: ignore[misc]

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        try:
            async with self._in_flight():
                return await self._model_achat(messages, **kwargs)
        except json.JSONDecodeError as exc:
            raise ModelReplyError(f"The model server's reply is not valid JSON ({exc}).") from None
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise ModelReplyError(
                "The model server's reply is not a chat completion with choices[0].message: "
                f"{type(exc).__name__}: {redact(str(exc))[:200]}"
            ) from None


    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        """The streamed reply, holding a place among the requests in flight until it ends; a
        stream that carries no content (a JSON body, an error page) is a `ModelReplyError`."""
        import httpx
        import openai

        # Ask for the usage chunk at the stream's end: without it OpenAI reports no tokens for a
        # streamed call, and the run's cost would have to count them itself.
        kwargs.setdefault("stream_options", {"include_usage": True})
        limit = self._in_flight()
        await limit.acquire()
        with ExitStack() as unless_streaming:
            unless_streaming.callback(limit.release)
            stream = await super().astream_chat(messages, **kwargs)  # type: ignore[misc]
            unless_streaming.pop_all()  # the stream holds its place until it ends (relay)

        async def relay() -> Any:
            try:
                said = False
                async for chunk in stream:
                    said = said or bool(chunk.delta)
                    yield chunk
                if not said:
                    raise ModelReplyError("The model server's streamed reply held no content "
                                          "(not a stream of chat.completion.chunk events).")
            except httpx.TransportError as exc:  # cut mid-stream: what the SDK says before one
                raise openai.APIConnectionError(request=exc.request) from exc
            finally:
                limit.release()

        return relay()


def reported_usage(data: dict[str, Any]) -> dict[str, int]:
    """The token counts the server reported; none when it sent no `usage` (llama-index would
    say 0, which reads as a free call rather than an uncounted one)."""
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return {}
    return {key: int(usage.get(key) or 0) for key in ("prompt_tokens", "completion_tokens", "total_tokens")}


def plain_text(choice: dict[str, Any], message: dict[str, Any]) -> bool:
    """A reply choice that is only text: every other field of the message empty (servers send
    `"refusal": null`, `"tool_calls": []`, `"reasoning_content": null`), no logprobs."""
    return (
        isinstance(message.get("content"), str | None)
        and message.get("role") in (None, "assistant")
        and not choice.get("logprobs")
        and not any(value for key, value in message.items() if key not in ("role", "content"))
    )


@cache
def _chat_completion_type() -> type:
    from openai.types.chat import ChatCompletion

    return ChatCompletion


@cache
def _scrubbing_clients() -> tuple[type, type]:
    """The openai clients, building HTTP errors without API keys in them: a 401's body may
    echo the key, and llama-index's instrumentation reports every error's text (its spans
    see the error before any caller could clean it)."""
    import openai

    class ScrubbingOpenAI(openai.OpenAI):
        def _make_status_error(self, err_msg: str, *, body: object, response: Any) -> Any:
            return scrub(super()._make_status_error(redact(err_msg), body=body, response=response))

    class ScrubbingAsyncOpenAI(openai.AsyncOpenAI):
        def _make_status_error(self, err_msg: str, *, body: object, response: Any) -> Any:
            return scrub(super()._make_status_error(redact(err_msg), body=body, response=response))

    return ScrubbingOpenAI, ScrubbingAsyncOpenAI


@cache
def checked_classes() -> tuple[type, type]:
    """OpenAI and OpenAILike with `_CheckedReplies`; imported on first use (the openai SDK is big)."""
    from llama_index.llms.openai import OpenAI
    from llama_index.llms.openai_like import OpenAILike

    # llama-index puts the key in the model's repr and in `to_dict()`, which every LLM call
    # sends to instrumentation handlers (LLMChatStartEvent.model_dict); here it is in neither.
    hidden_key = Field(default=None, exclude=True, repr=False, description="The API key.")

    class CheckedOpenAI(_CheckedReplies, OpenAI):
        api_key: str = hidden_key
        _client_retries: int = PrivateAttr(default=2)
        _limits: weakref.WeakKeyDictionary = PrivateAttr(default_factory=weakref.WeakKeyDictionary)
        _aclients: dict = PrivateAttr(default_factory=dict)
        _max_in_flight: int = PrivateAttr(default=64)
        _new_http_client: Any = PrivateAttr(default=None)

    class CheckedOpenAILike(CheckedOpenAI, OpenAILike):  # OpenAILike is an OpenAI: one set of fields

        async def _model_achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            # OpenAILike.achat only adds the path for completion models, and a second
            # instrumentation span around OpenAI.achat's own (its callback still reports
            # the call): one span less per call for a chat model.
            if self.is_chat_model:
                return await OpenAI.achat(self, messages, **kwargs)
            return await OpenAILike.achat(self, messages, **kwargs)

    return CheckedOpenAI, CheckedOpenAILike
