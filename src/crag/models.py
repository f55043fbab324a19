"""Picks the models: the bundled offline embedding model, and OpenAI or any compatible server."""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Sequence
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM, ChatMessage, ChatResponse, TextBlock
from pydantic import Field, PrivateAttr

from crag._offload import off_loop
from crag.config import LLMSettings
from crag.errors import ConfigError, ModelReplyError, redact, register_secret, scrub


class WordLlamaEmbedding(BaseEmbedding):
    """WordLlama's 256-d static embeddings, loaded from the files inside its wheel.

    `WordLlama.load()` looks for the tokenizer in the wrong folder and then tries to
    download it, so the weights and tokenizer are opened here directly: nothing is
    fetched, and loading takes about 0.3 s.
    """

    model_name: str = "wordllama-l2_supercat-256"
    _model: Any = PrivateAttr(default=None)

    def _load(self) -> Any:
        if self._model is None:
            self._model = _bundled_wordllama()
        return self._model

    def warm_up(self) -> None:
        """Load the model now (about 0.15 s), not in the first step that embeds."""
        self._load()

    def embed_many(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text."""
        if not texts:
            return np.zeros((0, 256), dtype=np.float32)
        return np.asarray(self._load().embed(texts, norm=True), dtype=np.float32)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self.embed_many([query])[0].tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self.embed_many([text])[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self.embed_many(texts).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await off_loop(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await off_loop(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await off_loop(self._get_text_embeddings, texts)


class _root_logging_kept:  # noqa: N801 - used as a statement, like a function
    """Undo `logging.basicConfig(level=INFO)`, which wordllama calls when imported.

    Left in place it would make every library in the process log to stderr at INFO
    (httpx announces each request, openai each retry), whatever the application chose.
    """

    def __enter__(self) -> None:
        root = logging.getLogger()
        self._handlers, self._level = list(root.handlers), root.level

    def __exit__(self, *exc_info: object) -> None:
        root = logging.getLogger()
        for handler in root.handlers[:]:
            if handler not in self._handlers:
                root.removeHandler(handler)
        root.setLevel(self._level)


@cache
def _bundled_wordllama() -> Any:
    """WordLlama from its wheel's own files, loaded once per process (ingest, retrieval
    and every workflow built in the process share it; the model is read-only)."""
    with _root_logging_kept():
        import wordllama
        from wordllama.inference import WordLlamaInference
    from safetensors import safe_open
    from tokenizers import Tokenizer

    root = Path(wordllama.__file__).parent
    tokenizer = Tokenizer.from_file(str(root / "tokenizers" / "l2_supercat_tokenizer_config.json"))
    with safe_open(str(root / "weights" / "l2_supercat_256.safetensors"), framework="np") as f:
        weights = f.get_tensor("embedding.weight")
    return WordLlamaInference(weights, tokenizer, binary=False)


class LLMFactory:
    """Builds the configured chat model lazily, once."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings

    @cached_property
    def llm(self) -> LLM:
        return openai_llm(self.settings)


def openai_llm(settings: LLMSettings) -> LLM:
    """OpenAI, or any OpenAI-compatible server (vLLM, Ollama, llama.cpp) when `base_url` is set.

    One layer of retries: the openai client's own (`max_retries` attempts after the first,
    exponential backoff with jitter, honouring Retry-After), each attempt bounded by
    `timeout`. llama-index's extra retry loop around it is switched off; left on, it
    multiplied the attempts ((1 + n) * n) and waited 1-20 s between its rounds.
    """
    if not settings.api_key and not settings.base_url:
        raise ConfigError(
            "An LLM component was chosen but no model is configured: set OPENAI_API_KEY, "
            "or OPENAI_BASE_URL / [llm] base_url for an OpenAI-compatible server."
        )
    api_key = settings.api_key.get_secret_value() if settings.api_key else "not-needed"
    if settings.api_key:
        register_secret(api_key)
    common: dict[str, Any] = dict(
        model=settings.model,
        api_key=api_key,
        temperature=0.0,
        timeout=settings.timeout,
        max_retries=0,  # llama-index's retry loop; the client's are set below
    )
    checked_openai, checked_openai_like = _checked_classes()
    if settings.base_url:
        llm: Any = checked_openai_like(
            api_base=settings.base_url,
            is_chat_model=True,
            context_window=settings.context_window,
            **common,
        )
    else:
        llm = checked_openai(**common)
    llm._client_retries = settings.max_retries
    return llm


# Chat requests one model object keeps in flight at once, per event loop; the rest wait
# their turn. httpx's connection pool (httpcore) matches every queued request against
# every connection each time one frees up: with ~1000 requests in flight (200 concurrent
# runs grading 5 chunks each) that work starved the event loop and no request was sent.
MAX_IN_FLIGHT = 64


class _CheckedReplies:
    """Chat replies that are usable or a clear error; HTTP errors free of API keys; at
    most `MAX_IN_FLIGHT` requests at once.

    Mixed into llama-index's OpenAI classes; the openai client gets `_client_retries`.
    """

    def _in_flight(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        limits: weakref.WeakKeyDictionary = self._limits  # type: ignore[attr-defined]
        if loop not in limits:
            limits[loop] = asyncio.Semaphore(MAX_IN_FLIGHT)
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
            kwargs["http_client"] = kwargs.get("http_client") or _async_http_client()
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
        Client CPU per call 2.9 -> 2.0-2.2 ms with the single span below
        (benchmarks/model_client.py, 700 in flight); seven calls a question.
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
        usage = _reported_usage(data)
        if _plain_text(choice, found):
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


def _reported_usage(data: dict[str, Any]) -> dict[str, int]:
    """The token counts the server reported; none when it sent no `usage` (llama-index would
    say 0, which reads as a free call rather than an uncounted one)."""
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return {}
    return {key: int(usage.get(key) or 0) for key in ("prompt_tokens", "completion_tokens", "total_tokens")}


def _plain_text(choice: dict[str, Any], message: dict[str, Any]) -> bool:
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


def _async_http_client() -> Any:
    """openai's default async HTTP client (its timeout, limits, redirects), its requests
    spread over `POOL_SHARDS` of httpx's connection pools."""
    import httpx
    import openai
    from openai._constants import DEFAULT_CONNECTION_LIMITS

    tls = httpx.create_ssl_context()  # one for all pools: each loads the CA bundle (~10 ms)
    pools = [
        httpx.AsyncHTTPTransport(verify=tls, limits=DEFAULT_CONNECTION_LIMITS)
        for _ in range(POOL_SHARDS)
    ]
    return openai.DefaultAsyncHttpxClient(transport=_pool_shards()(pools))


# httpcore's pool walks all its connections (polling each idle socket) and all queued
# requests whenever a request starts or ends, so the CPU per call grows with the calls in
# flight: 8-9 ms per call at 64 in flight against a loopback server, 2.2-3.0 ms with the
# calls spread one per pool; fewer pools cost more: 2.7-3.1 ms at 16, 2.8-4.0 ms at 8
# (benchmarks/model_client.py).
POOL_SHARDS = MAX_IN_FLIGHT


@cache
def _pool_shards() -> type:
    """`PoolShards`, defined on first use (httpx comes with the openai SDK, imported late)."""
    import httpx

    class PoolShards(httpx.AsyncBaseTransport):
        """Several transports as one: each request goes to the one with the fewest requests
        in flight. Errors, timeouts and TLS stay those of the transports given."""

        def __init__(self, pools: Sequence[httpx.AsyncBaseTransport]) -> None:
            self.pools = list(pools)
            self.busy = [0] * len(self.pools)

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            shard = min(range(len(self.pools)), key=self.busy.__getitem__)
            self.busy[shard] += 1
            try:
                # Busy until the reply's headers arrive: where a model spends its time.
                return await self.pools[shard].handle_async_request(request)
            finally:
                self.busy[shard] -= 1

        async def aclose(self) -> None:
            for pool in self.pools:
                await pool.aclose()

    return PoolShards


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
def _checked_classes() -> tuple[type, type]:
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

    class CheckedOpenAILike(_CheckedReplies, OpenAILike):
        api_key: str = hidden_key
        _client_retries: int = PrivateAttr(default=2)
        _limits: weakref.WeakKeyDictionary = PrivateAttr(default_factory=weakref.WeakKeyDictionary)
        _aclients: dict = PrivateAttr(default_factory=dict)

        async def _model_achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            # OpenAILike.achat only adds the path for completion models, and a second
            # instrumentation span around OpenAI.achat's own (its callback still reports
            # the call): one span less per call for a chat model.
            if self.is_chat_model:
                return await OpenAI.achat(self, messages, **kwargs)
            return await OpenAILike.achat(self, messages, **kwargs)

    return CheckedOpenAI, CheckedOpenAILike
