"""The settings of a run: the chat model (`[llm]`), what one question may spend (`[budget]`),
the grade cache (`[cache]`), the run's time (`[run]`) and `crag serve` (`[server]`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr

from crag.config.section import Section


class LLMSettings(Section):
    model: str = "gpt-4o-mini"
    base_url: str | None = None
    api_key: SecretStr | None = None
    timeout: float = Field(60.0, gt=0)
    max_retries: int = Field(2, ge=0)
    context_window: int = 8192
    price_in: float | None = Field(None, ge=0, description="US dollars per million prompt tokens, for the cost record.")
    price_out: float | None = Field(None, ge=0, description="US dollars per million completion tokens.")
    # Reply-length limits (`max_tokens`) per purpose: a small model that rambles or never stops
    # costs at most this much, and a structured reply cut at its limit is refused, not read.
    in_flight: int = Field(
        64, gt=0,
        description="Model requests in flight at once, per process (default 64); more wait in crag, their "
        "timeout not yet running. Set it to the server's parallel slots for a server that serves one or "
        "two requests at a time (llama.cpp's --parallel, OLLAMA_NUM_PARALLEL): a request queued there "
        "times out and is sent again.",
    )
    max_tokens_grade: int = Field(8, gt=0, description="One grade: a number from 0 to 10.")
    max_tokens_batch_grade: int = Field(
        128, gt=0, description="A JSON list of grades, all chunks in one call (about 3 tokens a grade)."
    )
    max_tokens_rewrite: int = Field(48, gt=0, description="A web search query.")
    max_tokens_condense: int = Field(96, gt=0, description="A follow-up rewritten as a standalone question.")
    max_tokens_decompose: int = Field(160, gt=0, description="A JSON list of sub-questions, or a follow-up query.")
    max_tokens_answer: int = Field(512, gt=0, description="The cited answer.")
    max_tokens: int = Field(
        2048, gt=0, description="Any other call (reranking, document choice, ingest's propositions and summaries)."
    )

    @property
    def configured(self) -> bool:
        return bool(self.api_key or self.base_url)

    @property
    def local(self) -> bool:
        """The model is served from this machine (a loopback `base_url`): often one request at a time."""
        return self.base_url is not None and is_local_url(self.base_url)


class BudgetSettings(Section):
    """Limits on one question's model use; reached, the offline components answer the rest."""

    calls: int | None = Field(None, ge=0, description="Model calls per question.")
    tokens: int | None = Field(None, ge=0, description="Model tokens (in and out) per question.")
    seconds: float | None = Field(None, gt=0, description="Seconds after which no model call starts.")

    @property
    def limited(self) -> bool:
        return any(limit is not None for limit in (self.calls, self.tokens, self.seconds))


class CacheSettings(Section):
    """The grade cache beside the index: a model's grade of a chunk for a question, kept."""

    enabled: bool = Field(True, description="Read and keep model grades (grades.sqlite beside the index).")
    max_entries: int = Field(100_000, gt=0, description="Grades kept; the least recently used go first.")


class RunSettings(Section):
    timeout: float = Field(120.0, gt=0, description="Seconds before a whole run is cancelled.")
    fallback_seconds: float = Field(
        10.0, gt=0,
        description="Seconds of each run kept for the offline components: every model call (its "
        "retries and backoff included) ends by the run's deadline, `timeout` less this (at most "
        "half the timeout), so a model that hangs or never stops still leaves time to answer.",
    )


class ServerSettings(Section):
    """`crag serve`: where it listens, who may call it, where runs are kept."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_key: SecretStr | None = Field(
        None, description="When set (or CRAG_API_KEY), every route but /health needs it."
    )
    store: str | None = Field(
        None,
        description="Where runs are kept: a SQLite file (default: server.db in the index folder, "
        "one per served index set) or a postgresql:// URL, shared by several server processes.",
    )
    collections: list[str] | None = Field(
        None, description="The collections served (by name; 'default' is the index folder itself); "
        "none given: every collection found in the index folder."
    )
    keys_file: Path | None = Field(
        None, description="The keys `crag keys` creates (hashed), which `crag serve` accepts beside "
        "api_key (default: keys.json in the index folder)."
    )
    max_runs: int = Field(8, ge=1, description="Runs in flight at once; more wait in a queue.")
    max_queue: int = Field(
        8, ge=0, description="Run requests waiting (first come, first served) beyond max_runs; "
        "beyond that a 503 with Retry-After. About one max_runs: at 3x capacity admitted runs "
        "then wait no more than one run's time (benchmarks/load.py --http)."
    )
    max_body_bytes: int = Field(65_536, ge=1024, description="Largest request body; larger is a 413.")
    header_timeout: float = Field(
        10.0, gt=0, description="Seconds a connection has to send a request's headers, from its "
        "opening or its previous response; then it is closed."
    )
    max_connections: int = Field(
        1000, ge=1, description="Connections open at once; beyond it a new one replaces the one "
        "waiting longest for its headers, or is closed when every one is busy with a request."
    )
    keep_runs: int = Field(10_000, ge=1, description="Finished runs kept in the store; older ones pruned.")
    keep_days: float = Field(30.0, gt=0, description="Days a finished run is kept in the store.")
    orphan_after: float = Field(
        30.0, gt=0, description="Seconds without a heartbeat after which a server's running runs "
        "are marked failed by any other server sharing the store."
    )


def is_local_url(url: str) -> bool:
    """True for an address on this machine: localhost, a loopback IP, or 0.0.0.0."""
    import ipaddress
    from urllib.parse import urlsplit

    host = (urlsplit(url if "//" in url else f"//{url}").hostname or "").lower()
    if host in ("localhost", "0.0.0.0") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
