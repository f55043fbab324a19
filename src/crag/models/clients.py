"""The configured chat model: OpenAI, or any OpenAI-compatible server, built once and lazily."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from llama_index.core.llms import LLM

from crag._compat.openai import checked_classes
from crag.config import LLMSettings
from crag.errors import ConfigError, register_secret
from crag.models.budgeted import BudgetedLLM
from crag.models.http_pools import MAX_IN_FLIGHT, async_http_client


class LLMFactory:
    """Builds the configured chat model lazily, once; `budgeted` (default): each call is charged
    to the running question's budget first, and ended by its deadline (`BudgetedLLM`)."""

    def __init__(self, settings: LLMSettings, *, budgeted: bool = True) -> None:
        self.settings = settings
        self.budgeted = budgeted

    @cached_property
    def llm(self) -> LLM:
        llm = openai_llm(self.settings)
        # Every call has a reply-length limit: its purpose's own, else `[llm] max_tokens`. Not
        # the client's `max_tokens`, which llama-index sends in place of any call's own.
        return BudgetedLLM(llm=llm, max_tokens=self.settings.max_tokens) if self.budgeted else llm


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
    checked_openai, checked_openai_like = checked_classes()
    if settings.base_url:
        llm: Any = checked_openai_like(
            api_base=settings.base_url,
            is_chat_model=True,
            context_window=settings.context_window,
            **common,
        )
    else:
        llm = checked_openai(**common)
    # A request waiting in crag has no timeout running; one queued at a one-at-a-time server
    # would time out there and be sent again, doubling the server's work.
    in_flight = min(settings.in_flight, MAX_IN_FLIGHT)
    llm.set_client_limits(retries=settings.max_retries, max_in_flight=in_flight, new_http_client=async_http_client)
    return llm
