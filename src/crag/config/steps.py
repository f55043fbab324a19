"""The settings of a question's steps: retrieval, postprocessing, grading, refining, decomposing,
rewriting, web search and synthesis."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from crag.config.section import Section


class RetrieverSettings(Section):
    kind: Literal["hybrid", "vector", "bm25", "summary"] = "hybrid"
    top_k: int = Field(5, gt=0, description="Chunks the grader sees.")
    candidates: int = Field(50, gt=0, description="Per-ranker depth before fusion.")
    summary_documents: int = Field(2, gt=0, description="Documents picked by their summaries (kind 'summary').")
    summary_choice: Literal["auto", "embedding", "llm"] = Field(
        "auto", description="How kind 'summary' picks documents: embedding similarity or an LLM's choice."
    )


PostprocessStage = Literal["similarity_cutoff", "keywords", "sentence_window", "rerank", "optimizer", "reorder"]


class PostprocessSettings(Section):
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


class GraderSettings(Section):
    kind: Literal["auto", "lexical", "llm", "rerank", "cascade"] = Field(
        "auto",
        description="lexical: the offline evaluator; llm: the model grades every chunk; rerank: the "
        "[reranker] grades all chunks in one request; cascade: the offline evaluator grades, and only "
        "chunks scoring inside [band_low, band_high) go to the model (the [reranker] when configured, "
        "else the LLM); auto: the [reranker] when configured, else llm with a model, else lexical.",
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


RerankShape = Literal["auto", "cohere", "cohere-v2", "jina", "vllm", "llamacpp", "infinity", "tei"]


class RerankerSettings(Section):
    """A cross-encoder reranker that grades (`[grader] kind = "rerank"`): a rerank server's
    endpoint (`base_url`), or a model folder run locally on ONNX Runtime (`model_dir`)."""

    kind: Literal["auto", "http", "onnx"] = Field(
        "auto", description="http: a rerank server at base_url; onnx: the model in model_dir; auto: onnx "
        "when model_dir is set, else http."
    )
    base_url: str | None = Field(None, description="The rerank server, e.g. http://localhost:8080 (kind http).")
    model: str | None = Field(None, description="The model name sent to the server (some servers need one).")
    api_key: SecretStr | None = Field(None, description="Sent as a bearer token; also CRAG_RERANKER_API_KEY.")
    shape: RerankShape = Field("auto", description="The server's request and reply shape; auto: found by asking.")
    scores: Literal["auto", "probability", "logit"] = Field(
        "auto", description="logit: sigmoid of each score; auto: as is when all in [0, 1], else sigmoid."
    )
    timeout: float = Field(10.0, gt=0, description="Seconds per rerank request (one retry), within the run's deadline.")
    model_dir: Path | None = Field(None, description="A cross-encoder's folder: model.onnx and tokenizer.json (kind onnx).")
    max_chars: int = Field(2000, gt=0, description="Characters of each chunk sent to the reranker.")
    # The reranker's own thresholds on its 0-1 score, as `crag calibrate` fitted them; unset,
    # 0.5 / 0.1 (`grading.rerank.RERANK_THRESHOLDS`). [grader] upper/lower still override them.
    upper: float | None = Field(None, ge=0.0, le=1.0, description="Fitted: a chunk >= upper is Correct. Unset: 0.5.")
    lower: float | None = Field(None, ge=0.0, le=1.0, description="Fitted: all chunks < lower is Incorrect. Unset: 0.1.")

    @property
    def configured(self) -> bool:
        """Whether a reranker is named: a server's `base_url` or a `model_dir`."""
        return bool(self.base_url) or self.model_dir is not None

    @property
    def local(self) -> bool:
        """Whether it runs here on ONNX Runtime rather than on a server."""
        return self.kind == "onnx" or (self.kind == "auto" and self.model_dir is not None)

    @model_validator(mode="after")
    def _ordered(self) -> RerankerSettings:
        if self.lower is not None and self.upper is not None and self.lower > self.upper:
            raise ValueError(f"reranker.lower ({self.lower}) must not exceed reranker.upper ({self.upper})")
        return self


class RefinerSettings(Section):
    kind: Literal["strips"] = "strips"
    max_strips: int = Field(6, gt=0)
    # A sentence covering under a fifth of the question is noise; at 0.4, one SQuAD answer
    # sentence in six was dropped for scoring lower than the chunk it came from.
    min_score: float = Field(0.2, ge=0.0, le=1.0, description="Strips scoring below this are dropped.")
    speculative: bool = Field(True, description="Score strips alongside grading, not after it.")


class DecomposerSettings(Section):
    # "rules" splits comparisons and follows bridges offline (crag.steps.bridging); "llm" asks
    # the model for both; "none" answers every question in one hop.
    kind: Literal["auto", "rules", "llm", "none"] = "auto"


class RewriterSettings(Section):
    kind: Literal["auto", "keywords", "llm"] = "auto"
    speculative: bool = Field(True, description="Rewrite alongside grading, not after it.")


class WebSearchSettings(Section):
    kind: Literal["auto", "local", "tavily", "none"] = "auto"
    corpus: Path | None = Field(None, description="Directory or .jsonl searched by kind 'local'.")
    top_k: int = Field(3, gt=0)
    api_key: SecretStr | None = None
    base_url: str | None = None
    timeout: float = Field(20.0, gt=0, description="Seconds per search attempt.")
    max_retries: int = Field(2, ge=0, description="Attempts after the first (429, 5xx, resets).")


class SynthesizerSettings(Section):
    kind: Literal["auto", "extractive", "llm"] = "auto"
    max_sentences: int = Field(3, gt=0)
    max_chars: int | None = Field(
        300, gt=0,
        description="Offline answers: characters the answer runs to (its first sentence is always whole); "
        "unset: no bound, max_sentences alone.",
    )
