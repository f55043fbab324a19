"""A rerank server as a `crag.interfaces.Reranker`: one HTTP request scores all of a question's chunks.

Every rerank API crag knows takes a query and the documents and answers a score per document,
sorted by score, each naming its document by `index`; they differ in names and paths (`shape`):

- "cohere": `POST /v1/rerank` {model?, query, documents, top_n, return_documents}
  -> {results: [{index, relevance_score, document?}]} (https://docs.cohere.com/v1/reference/rerank);
- "cohere-v2": `POST /v2/rerank` {model (required), query, documents: [str], top_n} -> the same
  results (https://docs.cohere.com/reference/rerank);
- "jina": `POST /v1/rerank` {model, query, documents, top_n, return_documents} -> results, `document`
  a string or {text} (https://jina.ai/reranker/);
- "vllm": `/rerank` (also `/v1/rerank`, `/v2/rerank`) {model?, query, documents, top_n}
  -> results[].document {text} (vllm/entrypoints/openai/protocol.py, `RerankRequest`/`RerankResponse`);
- "llamacpp": `llama-server --reranking`: `/rerank` (or `/v1/rerank`) {query, documents, top_n}
  -> results[].index, relevance_score, raw logits (tools/server/README.md, `POST /reranking`);
- "infinity": `/rerank` {query, documents, return_documents, top_n} -> {results: [...]} (`data` before
  0.0.5x; libs/infinity_emb/infinity_emb/fastapi_schemas/pymodels.py, `RerankInput`/`ReRankResult`);
- "tei": Hugging Face text-embeddings-inference, `POST /rerank` {query, texts, raw_scores, return_text,
  truncate} -> a bare list of {index, score} (router/src/http/types.rs, `RerankRequest`/`Rank`).

"auto" picks by the host: api.cohere.com (or .ai) is "cohere-v2", api.jina.ai "jina"; any other
server gets the common Cohere/Jina body at `{base_url}/rerank` (vLLM, llama.cpp and Infinity all
answer it; TEI wants shape "tei"). Every reply is read the same way, whichever form it takes: a
`results` (or `data`) list or a bare list, each entry an `index` and a `relevance_score` (or
`score`), so a server that answers in the other family's form is still understood.

Scores are brought to [0, 1] the same way for every server (`scores`): "probability" takes them
as they come (Cohere, Jina, vLLM, Infinity and TEI apply the model's sigmoid); "logit" applies
the sigmoid here (llama.cpp gives the classifier's raw logits); "auto" takes a reply whose scores
all lie in [0, 1] as probabilities and otherwise squashes every score with the sigmoid, since
only raw logits leave [0, 1]; once a server has sent one, all its later replies are squashed too,
so that two questions are never read on two scales. Shape "llamacpp" is read as logits from the
start, and a "tei" server is asked for raw scores only under "logit".
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import weakref
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr

from crag.budget import DeadlineReached, current_budget
from crag.errors import ConfigError, RerankError, hide_password, redact, register_secret
from crag.models.http_pools import MAX_IN_FLIGHT, tls_context
from crag.trace import note_model_call

SHAPES = ("auto", "cohere", "cohere-v2", "jina", "vllm", "llamacpp", "infinity", "tei")
SCORE_SCALES = ("auto", "probability", "logit")
_NEEDS_MODEL = ("cohere-v2", "jina")  # their APIs refuse a request without one
_VERSIONED_PATHS = {"cohere": "/v1/rerank", "cohere-v2": "/v2/rerank", "jina": "/v1/rerank"}
_HOSTED = {"api.cohere.com": "cohere-v2", "api.cohere.ai": "cohere-v2", "api.jina.ai": "jina"}
# Worth one more try: the server or the way to it failed, not the request.
_RETRIED_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def resolve_shape(shape: str, base_url: str) -> str:
    """The shape "auto" stands for at `base_url` (see the module's docstring); others as given."""
    if shape not in SHAPES:
        raise ConfigError(f"reranker shape must be one of {', '.join(SHAPES)}, not {shape!r}")
    if shape != "auto":
        return shape
    return _HOSTED.get((urlsplit(base_url).hostname or "").lower(), "auto")


def endpoint(base_url: str, shape: str) -> str:
    """The URL a request goes to: `base_url` itself when it ends in /rerank, else its shape's path
    (`/v1/rerank`, `/v2/rerank` for the hosted APIs, once: a base ending in /v1 is not doubled;
    `/rerank` after the base as given for servers, so `http://host:8000/v1` asks `/v1/rerank`)."""
    base = base_url.rstrip("/")
    if base.endswith("/rerank"):
        return base
    path = _VERSIONED_PATHS.get(shape)
    if path is None:
        return base + "/rerank"
    return re.sub(r"/v\d+$", "", base) + path


def clip(text: str, max_chars: int) -> str:
    """`text` cut to `max_chars`, at the last space in its final fifth when there is one."""
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    space = cut.rfind(" ", max_chars * 4 // 5)
    return cut[:space] if space > 0 else cut


def sigmoid(x: float) -> float:
    """1 / (1 + e^-x), without overflow at either end."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


class HttpReranker:
    """A rerank server or API, asked once per `rerank` call with all the documents.

    Each call is one request (`top_n` = every document; the results are put back in the
    documents' order by `index`), tried once more on a connection error, a timeout or a 5xx
    (408 and 429 too), never on another 4xx. It is charged to the running question's budget as
    one model call before it is sent (`BudgetReached`, `DeadlineReached` refuse it, as for a chat
    model) and counted on the running step; both tries end by the run's deadline
    (`DeadlineReached`). A reply that does not give every document one finite score raises
    `RerankError` saying what was wrong; no message carries the API key.

    Args:
        base_url: the server (`http://localhost:8080`) or API (`https://api.cohere.com`), or the
            full URL of its rerank route.
        model: the reranker's name; required by shapes "cohere-v2" and "jina", sent where given.
        api_key: sent as `Authorization: Bearer`; None sends no header.
        shape: the API's dialect, one of `SHAPES` (see the module's docstring).
        scores: how the server's scores are brought to [0, 1], one of `SCORE_SCALES`.
        timeout: seconds each try may take.
        max_chars: characters of each document sent: rerank servers cap a pair's input tokens
            (512 for the bge and MiniLM cross-encoders) and refuse, or silently cut, a longer one;
            cut here it costs nothing to send and reads the same everywhere.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: SecretStr | str | None = None,
        shape: str = "auto",
        scores: str = "auto",
        timeout: float = 10.0,
        max_chars: int = 2000,
    ) -> None:
        if not base_url or urlsplit(base_url).scheme not in ("http", "https"):
            raise ConfigError(f"the reranker's base_url must be an http(s) URL, not {base_url!r}")
        self.shape = resolve_shape(shape, base_url)
        if self.shape in _NEEDS_MODEL and not model:
            raise ConfigError(f"the {self.shape} rerank API needs a model name: set [reranker] model")
        if scores not in SCORE_SCALES:
            raise ConfigError(f"reranker scores must be one of {', '.join(SCORE_SCALES)}, not {scores!r}")
        if timeout <= 0 or max_chars <= 0:
            raise ConfigError(f"reranker timeout and max_chars must be positive, not {timeout} and {max_chars}")
        self.url = endpoint(base_url, self.shape)
        self.shown_url = hide_password(self.url)
        self.model = model
        self.scores = scores
        self.timeout = timeout
        self.max_chars = max_chars
        key = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
        register_secret(key)
        self._headers = {"Accept": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        # Raw logits: said so, or a llama.cpp server, or seen once (then for good, one scale per server).
        self._logits = scores == "logit" or (scores == "auto" and self.shape == "llamacpp")
        # The CA bundle is read here, not on the event loop.
        self._verify: Any = tls_context() if self.url.startswith("https:") else False
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"HttpReranker({self.shown_url!r}, shape={self.shape!r}, model={self.model!r})"

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One score in [0, 1] per document, in their order (see the class)."""
        if not documents:
            return []
        body = self.request_body(query, [clip(d, self.max_chars) for d in documents])
        budget = current_budget()
        if budget is not None:
            budget.charge_call()  # BudgetReached / DeadlineReached: nothing is sent
        note_model_call()
        left = budget.time_left() if budget is not None else None
        try:
            reply = await (self._post(body) if left is None else asyncio.wait_for(self._post(body), left))
        except asyncio.TimeoutError:  # only the deadline's: httpx's own are RerankErrors by now
            assert budget is not None
            budget.stop()
            raise DeadlineReached(
                f"the run's deadline for model calls ended the rerank request after {left:.1f} s") from None
        return self._scaled(self.read_scores(reply, len(documents)))

    def request_body(self, query: str, documents: list[str]) -> dict[str, Any]:
        """The JSON this reranker's shape asks with."""
        if self.shape == "tei":
            return {"query": query, "texts": documents, "raw_scores": self._logits,
                    "return_text": False, "truncate": True}
        body: dict[str, Any] = {"model": self.model} if self.model else {}
        body |= {"query": query, "documents": documents, "top_n": len(documents)}
        if self.shape in ("cohere", "jina", "infinity"):  # documented there; others would warn of it
            body["return_documents"] = False
        return body

    async def _post(self, body: dict[str, Any]) -> Any:
        """The reply's JSON; a try that failed on the way or at the server is made once more."""
        where = f"the reranker at {self.shown_url}"
        failure = RerankError(f"{where} was not asked")
        for _ in range(2):
            try:
                response = await self._client().post(self.url, json=body, headers=self._headers)
            except httpx.TimeoutException as exc:
                failure = RerankError(f"{where} did not answer within {self.timeout:g} s")
                failure.__cause__ = exc
                continue
            except httpx.TransportError as exc:  # refused, reset, cut short
                failure = RerankError(f"{where} could not be reached ({type(exc).__name__}: {redact(str(exc))})")
                failure.__cause__ = exc
                continue
            if response.status_code >= 400:
                failure = RerankError(self._refusal(response))
                if response.status_code in _RETRIED_STATUS:
                    continue
                raise failure
            try:
                return response.json()
            except (ValueError, UnicodeDecodeError):
                raise RerankError(f"{where} answered with something that is not JSON: "
                                  f"{redact(response.text[:120])!r}") from None
        failure.args = (f"{failure} (tried twice)",)
        raise failure

    def _refusal(self, response: httpx.Response) -> str:
        """An HTTP error, said with its status and the start of its body, keys removed."""
        text = " ".join(response.text.split())[:300]
        hint = ' (shape "auto" sent the Cohere/Jina body; a TEI server needs shape "tei")' if (
            self.shape == "auto" and "texts" in text) else ""
        return f"the reranker at {self.shown_url} answered HTTP {response.status_code}: {redact(text)}{hint}"

    def _client(self) -> httpx.AsyncClient:
        """One pooled client per event loop: connections opened on one loop cannot serve another
        (`workflow.ask()` runs each question on a fresh loop)."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout, pool=None),  # waiting for a connection: the deadline's to end
                limits=httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=MAX_IN_FLIGHT),
                verify=self._verify,
                follow_redirects=False,
            )
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close this event loop's connections (others close when their loop is collected)."""
        try:
            client = self._clients.pop(asyncio.get_running_loop(), None)
        except RuntimeError:
            return
        if client is not None:
            await client.aclose()

    def read_scores(self, reply: Any, count: int) -> list[float]:
        """The server's score for each of `count` documents, in their order, from any reply form;
        `RerankError` naming what is wrong when it does not give each exactly one finite score."""
        where = f"the reranker at {self.shown_url}"
        entries = reply if isinstance(reply, list) else None
        if isinstance(reply, dict):
            entries = next((reply[k] for k in ("results", "data") if isinstance(reply.get(k), list)), None)
        if entries is None:
            raise RerankError(f"{where} answered without a results list: {_glimpse(reply)}")
        scores: list[float | None] = [None] * count
        for entry in entries:
            if not isinstance(entry, dict):
                raise RerankError(f"{where} answered a result that is not an object: {_glimpse(entry)}")
            index = entry.get("index")
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
                raise RerankError(f"{where} answered index {_glimpse(index)} for {count} documents")
            if scores[index] is not None:
                raise RerankError(f"{where} answered index {index} twice")
            score = entry.get("relevance_score", entry.get("score"))
            if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
                raise RerankError(f"{where} answered score {_glimpse(score)} for document {index}")
            scores[index] = float(score)
        missing = [i for i, s in enumerate(scores) if s is None]
        if missing:
            raise RerankError(f"{where} left {len(missing)} of {count} documents out of its results: "
                              f"indexes {missing[:10]}")
        return [s for s in scores if s is not None]

    def _scaled(self, raw: list[float]) -> list[float]:
        """`raw` in [0, 1]: as they are, or through the sigmoid when they are logits."""
        outside = any(not 0.0 <= s <= 1.0 for s in raw)
        if outside and self.scores == "probability":
            raise RerankError(f"the reranker at {self.shown_url} gave scores outside [0, 1] "
                              f"({[s for s in raw if not 0.0 <= s <= 1.0][:3]}) with scores = \"probability\"; "
                              "set scores = \"logit\" (or \"auto\") for a server that gives raw logits")
        self._logits |= outside and self.scores == "auto"
        return [sigmoid(s) for s in raw] if self._logits else raw


def _glimpse(value: Any) -> str:
    """A short, key-free rendering of part of a reply, for an error message."""
    try:
        text = json.dumps(value, allow_nan=True)[:120]
    except (TypeError, ValueError):
        text = repr(value)[:120]
    return redact(text)
