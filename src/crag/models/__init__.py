"""The models crag uses: the bundled offline embedding model, and OpenAI or any compatible server.

- `local`: WordLlama, read from its wheel (nothing is downloaded);
- `clients`: the configured chat model (`LLMOptions` say which), built lazily once;
- `http_pools`: the connection pools its requests go through;
- `budgeted`: a model whose every call is charged to the question's budget first;
- `rerank`: a rerank server's client (Cohere, Jina, vLLM, llama.cpp, Infinity, TEI shapes);
- `onnx_rerank`: a cross-encoder run here on ONNX Runtime (the `onnx` extra), from a folder.
"""

from crag.models.budgeted import BudgetedLLM
from crag.models.clients import LLMFactory, LLMOptions, openai_llm
from crag.models.local import WordLlamaEmbedding

__all__ = ["BudgetedLLM", "LLMFactory", "LLMOptions", "WordLlamaEmbedding", "openai_llm"]
