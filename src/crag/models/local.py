"""The bundled offline embedding model: WordLlama, read from the files inside its wheel."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr

from crag._logs import root_logging_kept
from crag._offload import off_loop


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
        # Batches of 16: each holds a (texts, tokens, 256) float32 array in memory while it is
        # pooled; wordllama's 64 made that the peak of ingesting a long file.
        return np.asarray(self._load().embed(texts, norm=True, batch_size=16), dtype=np.float32)

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


@cache
def _bundled_wordllama() -> Any:
    """WordLlama from its wheel's own files, loaded once per process (ingest, retrieval
    and every workflow built in the process share it; the model is read-only)."""
    with root_logging_kept():  # wordllama calls logging.basicConfig(level=INFO) as it is imported
        import wordllama
        from wordllama.inference import WordLlamaInference
    from safetensors import safe_open
    from tokenizers import Tokenizer

    root = Path(wordllama.__file__).parent
    tokenizer = Tokenizer.from_file(str(root / "tokenizers" / "l2_supercat_tokenizer_config.json"))
    with safe_open(str(root / "weights" / "l2_supercat_256.safetensors"), framework="np") as f:
        weights = f.get_tensor("embedding.weight")
    return WordLlamaInference(weights, tokenizer, binary=False)
