"""Settings: defaults < crag.toml < environment (CRAG_SECTION__KEY) < arguments.

    [grader]
    kind = "lexical"     # or "llm", "auto"
    upper = 0.62

becomes `Settings().grader.upper`; `CRAG_GRADER__UPPER=0.7` overrides the file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from crag.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIG_FILE = "crag.toml"
ENV_PREFIX = "CRAG_"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class IndexSettings(_Section):
    path: Path = Path(".crag/index")
    chunk_size: int = Field(256, gt=16, description="Tokens per chunk.")
    chunk_overlap: int = Field(32, ge=0)
    chunker: Literal["sentence", "sentence_window", "agentic"] = Field(
        "sentence",
        description="sentence: token-budget chunks; sentence_window: one node per sentence with "
        "its neighbours in metadata (pair with the sentence_window postprocessor); agentic: "
        "propositions grouped into titled, summarized chunks.",
    )
    window_size: int = Field(3, ge=0, description="Sentences either side kept by the sentence_window chunker.")
    summaries: bool = Field(False, description="Write a summary per document (retriever kind 'summary').")
    agentic_threshold: float = Field(
        0.2, ge=-1.0, le=1.0,
        description="Agentic chunker, offline: a proposition joins the chunk whose centroid is most similar "
        "(cosine) when at least this similar, else starts a new chunk; higher gives more, smaller chunks.",
    )
    agentic_pronouns: bool = Field(
        True, description="Agentic chunker, offline: replace a sentence's leading pronoun with the latest subject."
    )

    @model_validator(mode="after")
    def _overlap_fits(self) -> IndexSettings:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"index.chunk_overlap ({self.chunk_overlap}) must be smaller than index.chunk_size ({self.chunk_size})"
            )
        return self


class VectorStoreSettings(_Section):
    """Where chunk vectors are searched: the index's own embeddings, or a Chroma server."""

    kind: Literal["embedded", "server"] = Field(
        "embedded",
        description="embedded: exact search over the index's embeddings, no server; "
        "server: a Chroma server at uri (pip install 'crag-workflows[chroma]').",
    )
    uri: str | None = Field(None, description="Chroma server URL for kind 'server', e.g. http://host:8000.")
    token: SecretStr | None = Field(None, description="Bearer token for the server, if it asks for one.")
    collection: str = Field("crag", description="Collection name prefix on the server; one per index.")


class RetrieverSettings(_Section):
    kind: Literal["hybrid", "vector", "bm25", "summary"] = "hybrid"
    top_k: int = Field(5, gt=0, description="Chunks the grader sees.")
    candidates: int = Field(50, gt=0, description="Per-ranker depth before fusion.")
    summary_documents: int = Field(2, gt=0, description="Documents picked by their summaries (kind 'summary').")
    summary_choice: Literal["auto", "embedding", "llm"] = Field(
        "auto", description="How kind 'summary' picks documents: embedding similarity or an LLM's choice."
    )


PostprocessStage = Literal["similarity_cutoff", "keywords", "sentence_window", "rerank", "optimizer", "reorder"]


class PostprocessSettings(_Section):
    """Stages between retrieve and grade, applied in the order listed in `stages`."""

    stages: list[PostprocessStage] = Field(default_factory=list)
    similarity_cutoff: float = Field(0.0, description="Drop chunks whose score is below this.")
    required_keywords: list[str] = Field(default_factory=list)
    exclude_keywords: list[str] = Field(default_factory=list)
    rerank: Literal["auto", "lexical", "llm"] = "auto"
    rerank_depth: int = Field(
        40, gt=0, description="With a rerank stage, the retriever returns this many; the reranker keeps retriever.top_k."
    )
    rerank_batch_size: int = Field(10, gt=0, description="Chunks per LLM rerank prompt; batches run concurrently.")
    optimizer_percentile: float | None = Field(0.5, gt=0.0, le=1.0, description="Keep this top share of sentences.")
    optimizer_threshold: float | None = Field(None, description="Keep sentences at least this similar to the query.")
    context_before: int = Field(1, ge=0, description="Sentences kept before each sentence the optimizer keeps.")
    context_after: int = Field(1, ge=0, description="Sentences kept after each sentence the optimizer keeps.")

    @model_validator(mode="after")
    def _keywords_mean_the_keywords_stage(self) -> PostprocessSettings:
        """Asking for keywords means filtering by them, through every door (the CLI's --require,
        crag.toml, CRAG_POSTPROCESS__REQUIRED_KEYWORDS for crag serve): the keywords stage goes
        first when it is not listed, so later stages see only matching chunks."""
        if (self.required_keywords or self.exclude_keywords) and "keywords" not in self.stages:
            self.__dict__["stages"] = ["keywords", *self.stages]  # not assignment: no re-validation loop
        return self

    @field_validator("stages", "required_keywords", "exclude_keywords", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        """`CRAG_POSTPROCESS__STAGES=rerank,reorder` and `--postprocess rerank,reorder` give lists."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


class GraderSettings(_Section):
    kind: Literal["auto", "lexical", "llm", "cascade"] = Field(
        "auto",
        description="lexical: the offline evaluator; llm: the model grades every chunk; cascade: the "
        "offline evaluator grades, and only chunks scoring inside [band_low, band_high) go to the model; "
        "auto: llm with a model, else lexical.",
    )
    # Unset, each grader reads its scores with its own thresholds (`grading.thresholds_of`): the
    # offline evaluator's are fitted with its weights (crag/steps/grading/evaluator.json), a
    # model's 0-10 rating keeps 0.677 / 0.327. A value set here overrides them for any grader.
    upper: float | None = Field(
        None, ge=0.0, le=1.0,
        description="Some chunk >= upper: Correct. Unset: the grader's own (offline evaluator: fitted; model: 0.677).",
    )
    lower: float | None = Field(
        None, ge=0.0, le=1.0,
        description="All chunks < lower: Incorrect. Unset: the grader's own (offline evaluator: fitted; model: 0.327).",
    )
    cover: float = Field(
        0.6, ge=0.0, le=1.0,
        description="Correct also needs the kept chunks to cover this share of the question together.",
    )
    concurrency: int = Field(32, gt=0, description="LLM grading calls in flight at once.")
    band_low: float = Field(0.3, ge=0.0, le=1.0, description="Cascade: offline scores from here ...")
    band_high: float = Field(0.7, ge=0.0, le=1.0, description="... to below here go to the model.")
    batch: bool = Field(False, description="The model grades all k chunks in one call.")

    @model_validator(mode="after")
    def _ordered(self) -> GraderSettings:
        if self.lower is not None and self.upper is not None and self.lower > self.upper:
            raise ValueError(f"grader.lower ({self.lower}) must not exceed grader.upper ({self.upper})")
        if self.band_low > self.band_high:
            raise ValueError(f"grader.band_low ({self.band_low}) must not exceed grader.band_high ({self.band_high})")
        return self


class RefinerSettings(_Section):
    kind: Literal["strips"] = "strips"
    max_strips: int = Field(6, gt=0)
    # A sentence covering under a fifth of the question is noise; at 0.4, one SQuAD answer
    # sentence in six was dropped for scoring lower than the chunk it came from.
    min_score: float = Field(0.2, ge=0.0, le=1.0, description="Strips scoring below this are dropped.")
    speculative: bool = Field(True, description="Score strips alongside grading, not after it.")


class DecomposerSettings(_Section):
    # "rules" splits comparisons and follows bridges offline (crag.steps.bridging); "llm" asks
    # the model for both; "none" answers every question in one hop.
    kind: Literal["auto", "rules", "llm", "none"] = "auto"


class RewriterSettings(_Section):
    kind: Literal["auto", "keywords", "llm"] = "auto"
    speculative: bool = Field(True, description="Rewrite alongside grading, not after it.")


class WebSearchSettings(_Section):
    kind: Literal["auto", "local", "tavily", "none"] = "auto"
    corpus: Path | None = Field(None, description="Directory or .jsonl searched by kind 'local'.")
    top_k: int = Field(3, gt=0)
    api_key: SecretStr | None = None
    base_url: str | None = None
    timeout: float = Field(20.0, gt=0, description="Seconds per search attempt.")
    max_retries: int = Field(2, ge=0, description="Attempts after the first (429, 5xx, resets).")


class SynthesizerSettings(_Section):
    kind: Literal["auto", "extractive", "llm"] = "auto"
    max_sentences: int = Field(3, gt=0)


class LLMSettings(_Section):
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


class BudgetSettings(_Section):
    """Limits on one question's model use; reached, the offline components answer the rest."""

    calls: int | None = Field(None, ge=0, description="Model calls per question.")
    tokens: int | None = Field(None, ge=0, description="Model tokens (in and out) per question.")
    seconds: float | None = Field(None, gt=0, description="Seconds after which no model call starts.")

    @property
    def limited(self) -> bool:
        return any(limit is not None for limit in (self.calls, self.tokens, self.seconds))


class CacheSettings(_Section):
    """The grade cache beside the index: a model's grade of a chunk for a question, kept."""

    enabled: bool = Field(True, description="Read and keep model grades (grades.sqlite beside the index).")
    max_entries: int = Field(100_000, gt=0, description="Grades kept; the least recently used go first.")


class RunSettings(_Section):
    timeout: float = Field(120.0, gt=0, description="Seconds before a whole run is cancelled.")
    fallback_seconds: float = Field(
        10.0, gt=0,
        description="Seconds of each run kept for the offline components: every model call (its "
        "retries and backoff included) ends by the run's deadline, `timeout` less this (at most "
        "half the timeout), so a model that hangs or never stops still leaves time to answer.",
    )


class ServerSettings(_Section):
    """`crag serve`: where it listens, who may call it, where runs are kept."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_key: SecretStr | None = Field(
        None, description="When set (or CRAG_API_KEY), every route but /health needs it."
    )
    store: str | None = Field(
        None,
        description="Where runs are kept: a SQLite file (default: server.db beside the index) "
        "or a postgresql:// URL, shared by several server processes.",
    )
    max_runs: int = Field(8, ge=1, description="Runs in flight at once; more wait in a queue.")
    max_queue: int = Field(
        8, ge=0, description="Run requests waiting (first come, first served) beyond max_runs; "
        "beyond that a 503 with Retry-After. About one max_runs: at 3x capacity admitted runs "
        "then wait no more than one run's time (benchmarks/load.py --http)."
    )
    max_body_bytes: int = Field(65_536, ge=1024, description="Largest request body; larger is a 413.")
    keep_runs: int = Field(10_000, ge=1, description="Finished runs kept in the store; older ones pruned.")
    keep_days: float = Field(30.0, gt=0, description="Days a finished run is kept in the store.")
    orphan_after: float = Field(
        30.0, gt=0, description="Seconds without a heartbeat after which a server's running runs "
        "are marked failed by any other server sharing the store."
    )


class IngestSettings(_Section):
    """`crag ingest`: readers for more file types, which links it follows, and the limits on
    reading one file (a file past one is skipped with its reason; the ingest goes on)."""

    symlinks: Literal["skip", "inside"] = Field(
        "skip",
        description="Links met inside a folder being ingested: skip (each named on one line), or "
        "inside: follow those whose target lies inside that folder. A path you name yourself is read.",
    )
    max_file_mb: float = Field(256.0, gt=0, description="Largest file read, as it lies on disk.")
    max_unpacked_mb: float = Field(
        200.0, gt=0, description="Bytes unpacked from one .docx, .epub or .pptx (its members together), counted as they stream."
    )
    max_text_mb: float = Field(32.0, gt=0, description="Text taken from one file (millions of characters).")
    max_seconds: float = Field(120.0, gt=0, description="Time one file's reader may take; past it the reader is stopped.")
    max_memory_mb: float = Field(
        512.0, gt=0, description="Memory one file's reader may take, beyond what its process starts with."
    )
    max_ocr_pages: int = Field(
        500, gt=0, description="Scanned pages read by OCR in one file (the ocr extra); each page's OCR "
        "gets ingest.max_seconds of its own. A file with more is left out.",
    )

    readers: dict[str, str] = Field(
        default_factory=dict,
        description='Suffix -> "module:function" of a reader for it, e.g. { ".log" = "mypkg.logs:read" }: '
        "the function takes a file's Path and returns or yields Documents or text.",
    )

    @field_validator("readers")
    @classmethod
    def _reader_paths(cls, readers: dict[str, str]) -> dict[str, str]:
        for suffix, target in readers.items():
            if not suffix.startswith(".") or len(suffix) < 2 or "/" in suffix:
                raise ValueError(f"{suffix!r} is not a file suffix; write it as \".log\"")
            module, _, name = target.partition(":")
            if not module or not name:
                raise ValueError(f"{suffix} = {target!r}: write the reader as \"module:function\"")
        return {suffix.lower(): target for suffix, target in readers.items()}


class Settings(_Section):
    """Every setting crag reads, grouped by the component it configures."""

    index: IndexSettings = IndexSettings()
    ingest: IngestSettings = IngestSettings()
    retriever: RetrieverSettings = RetrieverSettings()
    vector_store: VectorStoreSettings = VectorStoreSettings()
    postprocess: PostprocessSettings = PostprocessSettings()
    grader: GraderSettings = GraderSettings()
    refiner: RefinerSettings = RefinerSettings()
    decomposer: DecomposerSettings = DecomposerSettings()
    rewriter: RewriterSettings = RewriterSettings()
    web_search: WebSearchSettings = WebSearchSettings()
    synthesizer: SynthesizerSettings = SynthesizerSettings()
    llm: LLMSettings = LLMSettings()
    budget: BudgetSettings = BudgetSettings()
    cache: CacheSettings = CacheSettings()
    run: RunSettings = RunSettings()
    server: ServerSettings = ServerSettings()

    @classmethod
    def load(
        cls,
        config_file: str | Path | None = None,
        env: dict[str, str] | None = None,
        **overrides: dict[str, Any],
    ) -> Settings:
        """Merge defaults, the TOML file, the environment and `overrides` (section -> values)."""
        env = dict(os.environ) if env is None else env
        merged: dict[str, dict[str, Any]] = {}
        for layer in (_read_toml(config_file), _from_env(env), overrides):
            for section, values in layer.items():
                if not isinstance(values, dict):
                    raise ConfigError(f"Config section [{section}] must be a table of settings.")
                merged.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
        try:
            return cls.model_validate(merged)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(f"Invalid crag settings: {problems}") from None


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


def _read_toml(config_file: str | Path | None) -> dict[str, Any]:
    path = Path(config_file) if config_file else Path(CONFIG_FILE)
    if not path.exists():
        if config_file:
            raise ConfigError(f"Config file {path} does not exist.")
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"Config file {path} is not valid TOML: {exc}") from None
    except IsADirectoryError:
        raise ConfigError(f"Config file {path} is a folder; give a crag.toml file.") from None
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {path}: {exc.strerror or exc}.") from None


def _from_env(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, value in env.items():
        if name.startswith(ENV_PREFIX) and "__" in name:
            section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
            out.setdefault(section, {})[key] = value
    # The ecosystem's own variable names, so existing set-ups work unchanged.
    aliases = {
        "OPENAI_API_KEY": ("llm", "api_key"),
        "OPENAI_BASE_URL": ("llm", "base_url"),
        "OPENAI_MODEL": ("llm", "model"),
        "TAVILY_API_KEY": ("web_search", "api_key"),
        "CRAG_API_KEY": ("server", "api_key"),
    }
    for name, (section, key) in aliases.items():
        if env.get(name):
            out.setdefault(section, {}).setdefault(key, env[name])
    return out
