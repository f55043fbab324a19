"""The configured chat model: OpenAI, or any OpenAI-compatible server, built once and lazily."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from llama_index.core.llms import LLM
from pydantic import SecretStr

from crag._compat.openai import checked_classes
from crag.cost import load_tokenizer
from crag.errors import ConfigError, register_secret
from crag.models.budgeted import BudgetedLLM
from crag.models.http_pools import MAX_IN_FLIGHT, async_http_client


@dataclass(frozen=True)
class LLMOptions:
    """Which chat model, where, and how its requests are bounded (`crag.toml`'s `[llm]` gives
    these; its defaults are the same).

    Args:
        model: the model's name.
        base_url: an OpenAI-compatible server (vLLM, Ollama, llama.cpp); None is OpenAI.
        api_key: the key (text is wrapped in a `SecretStr`), kept out of reprs and logs.
        timeout: seconds per attempt.
        max_retries: attempts after the first.
        context_window: the server's context window (with `base_url`).
        in_flight: requests in flight at once, per process.
        max_tokens: the reply-length limit of a call that names none of its own.
    """

    model: str = "gpt-4o-mini"
    base_url: str | None = None
    api_key: SecretStr | None = field(default=None, repr=False)
    timeout: float = 60.0
    max_retries: int = 2
    context_window: int = 8192
    in_flight: int = 64
    max_tokens: int = 2048

    def __post_init__(self) -> None:
        if isinstance(self.api_key, str):
            object.__setattr__(self, "api_key", SecretStr(self.api_key))

    @property
    def configured(self) -> bool:
        """A model is set up: a key, or a server of its own."""
        return bool(self.api_key or self.base_url)


class LLMFactory:
    """Builds the configured chat model lazily, once; `budgeted` (default): each call is charged
    to the running question's budget first, and ended by its deadline (`BudgetedLLM`)."""

    def __init__(self, options: LLMOptions, *, budgeted: bool = True) -> None:
        self.options = options
        self.budgeted = budgeted

    @property
    def configured(self) -> bool:
        """A model is set up, so components that would use one ("auto") do."""
        return self.options.configured

    @cached_property
    def llm(self) -> LLM:
        llm = openai_llm(self.options)
        # Every call has a reply-length limit: its purpose's own, else `[llm] max_tokens`. Not
        # the client's `max_tokens`, which llama-index sends in place of any call's own.
        return BudgetedLLM(llm=llm, max_tokens=self.options.max_tokens) if self.budgeted else llm


def openai_llm(options: LLMOptions) -> LLM:
    """OpenAI, or any OpenAI-compatible server (vLLM, Ollama, llama.cpp) when `base_url` is set.

    One layer of retries: the openai client's own (`max_retries` attempts after the first,
    exponential backoff with jitter, honouring Retry-After), each attempt bounded by
    `timeout`. llama-index's extra retry loop around it is switched off; left on, it
    multiplied the attempts ((1 + n) * n) and waited 1-20 s between its rounds.
    """
    if not options.api_key and not options.base_url:
        raise ConfigError(
            "An LLM component was chosen but no model is configured: set OPENAI_API_KEY, "
            "or OPENAI_BASE_URL / [llm] base_url for an OpenAI-compatible server."
        )
    api_key = options.api_key.get_secret_value() if options.api_key else "not-needed"
    if options.api_key:
        register_secret(api_key)
    common: dict[str, Any] = dict(
        model=options.model,
        api_key=api_key,
        temperature=0.0,
        timeout=options.timeout,
        max_retries=0,  # llama-index's retry loop; the client's are set below
    )
    checked_openai, checked_openai_like = checked_classes()
    if options.base_url:
        llm: Any = checked_openai_like(
            api_base=options.base_url,
            is_chat_model=True,
            context_window=options.context_window,
            **common,
        )
    else:
        llm = checked_openai(**common)
    # A request waiting in crag has no timeout running; one queued at a one-at-a-time server
    # would time out there and be sent again, doubling the server's work.
    in_flight = min(options.in_flight, MAX_IN_FLIGHT)
    llm.set_client_limits(retries=options.max_retries, max_in_flight=in_flight, new_http_client=async_http_client)
    load_tokenizer()
    return llm
