"""Picks the models: the bundled offline embedding model, and OpenAI or any compatible server."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from pydantic import PrivateAttr

from crag.config import LLMSettings
from crag.errors import ConfigError


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
            import wordllama
            from safetensors import safe_open
            from tokenizers import Tokenizer
            from wordllama.inference import WordLlamaInference

            root = Path(wordllama.__file__).parent
            tokenizer = Tokenizer.from_file(str(root / "tokenizers" / "l2_supercat_tokenizer_config.json"))
            with safe_open(str(root / "weights" / "l2_supercat_256.safetensors"), framework="np") as f:
                weights = f.get_tensor("embedding.weight")
            self._model = WordLlamaInference(weights, tokenizer, binary=False)
        return self._model

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
        return self._get_query_embedding(query)


class LLMFactory:
    """Builds the configured chat model lazily, once."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings

    @cached_property
    def llm(self) -> LLM:
        return openai_llm(self.settings)


def openai_llm(settings: LLMSettings) -> LLM:
    """OpenAI, or any OpenAI-compatible server (vLLM, Ollama, llama.cpp) when `base_url` is set."""
    if not settings.api_key and not settings.base_url:
        raise ConfigError(
            "An LLM component was chosen but no model is configured: set OPENAI_API_KEY, "
            "or OPENAI_BASE_URL / [llm] base_url for an OpenAI-compatible server."
        )
    common: dict[str, Any] = dict(
        model=settings.model,
        api_key=settings.api_key.get_secret_value() if settings.api_key else "not-needed",
        temperature=0.0,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
    )
    if settings.base_url:
        from llama_index.llms.openai_like import OpenAILike

        return OpenAILike(
            api_base=settings.base_url,
            is_chat_model=True,
            context_window=settings.context_window,
            **common,
        )
    from llama_index.llms.openai import OpenAI

    return OpenAI(**common)
