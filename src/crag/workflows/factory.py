"""Builds a workflow from settings: component kinds are picked by name in `crag.toml`."""

from __future__ import annotations

from pathlib import Path

from crag._offload import warm_up
from crag.config import LLMSettings, RerankerSettings, Settings
from crag.errors import ConfigError
from crag.index import ChunkIndex
from crag.index.grade_cache import FILE_NAME as GRADE_CACHE_FILE
from crag.index.grade_cache import AsyncGradeCache, GradeCache, grade_scope
from crag.ingestion.configured import llm_options, options_of, vector_store_options
from crag.interfaces import Grader, Postprocessor, QueryRewriter, Reranker, Synthesizer, WebSearch
from crag.models import LLMFactory, WordLlamaEmbedding
from crag.prompts import BATCH_GRADE_PROMPT, GRADE_PROMPT
from crag.steps.bridging import LexicalBridgeFinder
from crag.steps.condensing import LLMCondenser, RuleCondenser
from crag.steps.decomposition import LLMDecomposer, RuleDecomposer
from crag.steps.grading import (
    BatchLLMGrader,
    CachedGrader,
    CascadeGrader,
    LexicalEvaluator,
    LLMGrader,
    RerankGrader,
    prompt_version,
    thresholds_of,
)
from crag.steps.postprocessing import (
    PostprocessOptions,
    check_index,
    postprocessors_for,
    retrieval_depth,
)
from crag.steps.refining import StripRefiner
from crag.steps.retrieval import HybridRetriever
from crag.steps.rewriting import KeywordRewriter, LLMRewriter
from crag.steps.synthesis import ExtractiveSynthesizer, LLMSynthesizer
from crag.steps.web_search import LocalCorpusSearch, TavilySearch
from crag.workflows import CorrectiveRAGWorkflow


class NoWebSearch:
    """Used when no web search is configured: the workflow does not search, and says so in the
    run's `degraded` list and explanation (`configured = False`)."""

    configured = False

    async def search(self, query: str) -> list:
        return []


def open_index(settings: Settings) -> ChunkIndex:
    """The live version of the index `[index] path` names, its vectors where `[vector_store]`
    keeps them (a Chroma server's index cannot be opened without)."""
    return ChunkIndex.load(settings.index.path, vector_store_options(settings))


def build_workflow(
    settings: Settings | None = None,
    *,
    index: ChunkIndex | None = None,
    grade_cache: GradeCache | AsyncGradeCache | None = None,
    **components: object,
) -> CorrectiveRAGWorkflow:
    """A workflow with components chosen by `settings`; `components` replace any by name.

    The model's grades are kept in `grade_cache` (by default `grades.sqlite` beside the index;
    `crag serve` on PostgreSQL passes one in PostgreSQL), unless `[cache] enabled` is false.

    Every component is warmed up (`warm_up_workflow`) before it is returned, so the first
    run's steps do their own work, not loading. Nothing process-wide changes: a process that
    serves runs may then tune the garbage collector for them with `crag.settle_heap()`, as
    `crag serve`, `crag ask` and `crag mcp` do.

    Example:
        wf = build_workflow(Settings.load(), grader=MyGrader())
    """
    settings = settings or Settings.load()
    index = index if index is not None else open_index(settings)
    embed_model = WordLlamaEmbedding()
    llms = LLMFactory(llm_options(settings))  # every call charged to its run's budget, and ended by its deadline
    use_llm = settings.llm.configured
    evaluator = LexicalEvaluator(index.term_stats)

    def pick(kind: str) -> bool:
        """True when an LLM component is wanted: asked for by name, or 'auto' with a model."""
        return kind == "llm" or (kind == "auto" and use_llm)

    grader = _grader(settings, index, llms, evaluator, model_wanted=pick(settings.grader.kind),
                     cache=grade_cache)
    limit = settings.llm  # each purpose's reply-length limit
    rewriter: QueryRewriter = (
        LLMRewriter(llms.llm, max_tokens=limit.max_tokens_rewrite) if pick(settings.rewriter.kind) else KeywordRewriter()
    )
    synthesizer: Synthesizer = (
        LLMSynthesizer(llms.llm, max_tokens=limit.max_tokens_answer)
        if pick(settings.synthesizer.kind)
        else ExtractiveSynthesizer(max_sentences=settings.synthesizer.max_sentences,
                                   max_chars=settings.synthesizer.max_chars)
    )
    kind = settings.decomposer.kind
    decomposer = LLMDecomposer(llms.llm, max_tokens=limit.max_tokens_decompose) if pick(kind) else None if kind == "none" else RuleDecomposer()
    post = postprocess_options(settings)
    defaults = dict(
        retriever=_summary_retriever(settings, index, embed_model, llms, components)
        if settings.retriever.kind == "summary"
        else HybridRetriever(
            index,
            embed_model,
            top_k=retrieval_depth(post, settings.retriever.top_k),
            mode=settings.retriever.kind,
            candidates=settings.retriever.candidates,
        ),
        grader=grader,
        refiner=StripRefiner(
            evaluator, max_strips=settings.refiner.max_strips, min_score=settings.refiner.min_score
        ),
        rewriter=rewriter,
        # A follow-up is made standalone as questions are rewritten: by the model when asked for.
        condenser=LLMCondenser(llms.llm, max_tokens=limit.max_tokens_condense)
        if pick(settings.rewriter.kind) else RuleCondenser(),
        decomposer=decomposer,
        # Offline, a bridge's second hop is found from what the first hop found; with a model,
        # the model writes it (each hop it grades costs calls). "none" answers in one hop.
        bridger=LexicalBridgeFinder(index.term_stats) if isinstance(decomposer, RuleDecomposer) else None,
        web_search=_web_search(settings),
        synthesizer=synthesizer,
        postprocessors=_postprocessors(settings, post, index, embed_model, llms, evaluator, components),
    )
    unknown = set(components) - set(defaults)
    if unknown:
        raise ConfigError(f"Unknown component(s) {sorted(unknown)}; expected one of {sorted(defaults)}.")
    defaults.update({k: v for k, v in components.items() if v is not None})
    workflow = CorrectiveRAGWorkflow(
        **defaults,
        fallback_decomposer=RuleDecomposer(),
        upper=settings.grader.upper,
        lower=settings.grader.lower,
        # The set judgment is lexical: it checks lexical grades, and would overrule another grader's.
        judge=evaluator if defaults["grader"] is evaluator else None,
        cover=settings.grader.cover,
        speculative_rewrite=settings.rewriter.speculative,
        speculative_refine=settings.refiner.speculative,
        timeout=settings.run.timeout,
        fallback_seconds=settings.run.fallback_seconds,
        budget=settings.budget,
        price_in=settings.llm.price_in,
        price_out=settings.llm.price_out,
    )
    warm_up_workflow(workflow, index)
    return workflow


def warm_up_workflow(workflow: object, index: ChunkIndex | None = None) -> None:
    """Load every model, store and table the workflow's components (and `index`) would
    otherwise load in their first step; each component's `warm_up`, where it has one.

    Cheap when done already: `crag serve` calls it on whatever workflow it was given.
    """
    warm_up(index, *(getattr(workflow, name, None) for name in COMPONENTS))


# The attributes under which crag's workflows (corrective and plain) keep their components.
COMPONENTS = (
    "retriever", "postprocessors", "grader", "refiner", "reader", "decomposer", "rewriter", "searcher",
    "synthesizer", "fallback_rewriter", "fallback_synthesizer",
)


def _grader(
    settings: Settings, index: ChunkIndex, llms: LLMFactory, evaluator: LexicalEvaluator, *, model_wanted: bool,
    cache: GradeCache | AsyncGradeCache | None = None,
) -> Grader:
    """The offline evaluator; or a model, its grades kept in the grade cache: the `[reranker]`
    (one request per question), or the LLM (one call per chunk or one per batch); or a cascade,
    where the model sees only the chunks the evaluator is unsure of.

    A configured reranker is the model wherever one grades: `rerank`, `cascade`, and `auto`."""
    options = settings.grader
    reranker = settings.reranker
    if options.kind == "rerank" and not reranker.configured:
        raise ConfigError('[grader] kind = "rerank" needs a reranker: set [reranker] base_url (a rerank server) '
                          "or [reranker] model_dir (a cross-encoder run here on ONNX Runtime).")
    reranks = options.kind == "rerank" or (options.kind in ("auto", "cascade") and reranker.configured)
    if options.kind != "cascade" and not model_wanted and not reranks:
        return evaluator
    model: Grader
    if reranks:
        model = RerankGrader(build_reranker(reranker), evaluator, max_chars=reranker.max_chars,
                             thresholds=thresholds_of(RerankGrader, reranker.upper, reranker.lower))
        # No prompt: what changes its scores is how they are read and how much of a chunk is sent.
        version, model_key = f"scores={reranker.scores}|chars={reranker.max_chars}", reranker_id(reranker)
    else:
        model = LLMGrader(
            llms.llm, fallback=evaluator, concurrency=options.concurrency, max_tokens=settings.llm.max_tokens_grade
        )
        version, model_key = prompt_version(GRADE_PROMPT), model_id(settings.llm)
        if options.batch:
            model = BatchLLMGrader(llms.llm, per_chunk=model, max_tokens=settings.llm.max_tokens_batch_grade)
            version = prompt_version(BATCH_GRADE_PROMPT, GRADE_PROMPT)
    if settings.cache.enabled and cache is None and index.path is not None:
        cache = GradeCache(index.path / GRADE_CACHE_FILE, max_entries=settings.cache.max_entries)
    if settings.cache.enabled and cache is not None:
        model = CachedGrader(model, cache, model=model_key, version=version,
                             scope=grade_scope(cache, index.path))
    if options.kind == "cascade":
        return CascadeGrader(evaluator, model, band=(options.band_low, options.band_high))
    return model


def model_id(llm: LLMSettings) -> str:
    """The model as the grade cache keys it: its name and the server that runs it."""
    return f"{llm.base_url or 'openai'}|{llm.model}"


def reranker_id(reranker: RerankerSettings) -> str:
    """The reranker as the grade cache keys it: the server and model, or the local model's folder."""
    if reranker.local:
        return f"onnx|{Path(str(reranker.model_dir)).expanduser().resolve()}"
    return f"{reranker.base_url}|{reranker.model or ''}"


def build_reranker(options: RerankerSettings) -> Reranker:
    """The `[reranker]`: a local cross-encoder (the `onnx` extra), or a rerank server's client.
    Imported here: neither is loaded by a run that does not rerank."""
    if options.local:
        if options.model_dir is None:
            raise ConfigError('[reranker] kind = "onnx" needs [reranker] model_dir: the cross-encoder\'s folder.')
        from crag.models.onnx_rerank import OnnxReranker

        return OnnxReranker(options.model_dir)
    if not options.base_url:
        raise ConfigError('[reranker] kind = "http" needs [reranker] base_url: the rerank server.')
    from crag.models.rerank import HttpReranker

    return HttpReranker(
        base_url=options.base_url, model=options.model,
        api_key=options.api_key,
        shape=options.shape, scores=options.scores, timeout=options.timeout, max_chars=options.max_chars,
    )


def _summary_retriever(
    settings: Settings, index: ChunkIndex, embed_model: WordLlamaEmbedding, llms: LLMFactory, components: dict
) -> object:
    """Retriever kind "summary" (None when the caller passes its own retriever, which
    then needs no summaries in the index)."""
    if components.get("retriever") is not None:
        return None
    from crag.steps.document_summaries import summary_retriever_for

    retriever = settings.retriever
    return summary_retriever_for(
        index,
        embed_model,
        llms,
        documents=retriever.summary_documents,
        choice=retriever.summary_choice,
        candidates=retriever.candidates,
    )


def _postprocessors(
    settings: Settings,
    options: PostprocessOptions,
    index: ChunkIndex,
    embed_model: WordLlamaEmbedding,
    llms: LLMFactory,
    evaluator: LexicalEvaluator,
    components: dict,
) -> list[Postprocessor] | None:
    """The `[postprocess] stages` (None when the caller passes its own postprocessors)."""
    if components.get("postprocessors") is not None:
        return None
    if components.get("retriever") is None:  # another retriever may bring its own windows
        check_index(options.stages, index.chunker)
    return postprocessors_for(
        options, top_n=settings.retriever.top_k, embed_model=embed_model, llms=llms, evaluator=evaluator
    )


def postprocess_options(settings: Settings) -> PostprocessOptions:
    """`[postprocess]`, with the model's concurrency for a rerank stage, as the stages' options."""
    post = settings.postprocess
    return options_of(
        PostprocessOptions, post, stages=tuple(post.stages), required_keywords=tuple(post.required_keywords),
        exclude_keywords=tuple(post.exclude_keywords), rerank_concurrency=settings.grader.concurrency,
    )


def _web_search(settings: Settings) -> WebSearch:
    web = settings.web_search
    kind = web.kind
    if kind == "auto":
        kind = "tavily" if web.api_key else "local" if web.corpus else "none"
    if kind == "tavily":
        if not web.api_key:
            raise ConfigError("web_search.kind is 'tavily' but TAVILY_API_KEY is not set.")
        return TavilySearch(
            web.api_key.get_secret_value(),
            base_url=web.base_url,
            top_k=web.top_k,
            timeout=web.timeout,
            max_retries=web.max_retries,
        )
    if kind == "local":
        if not web.corpus:
            raise ConfigError("web_search.kind is 'local' but no corpus is set (--web-corpus PATH).")
        if not Path(web.corpus).exists():
            raise ConfigError(f"Web corpus {web.corpus} does not exist.")
        return LocalCorpusSearch(web.corpus, top_k=web.top_k)
    return NoWebSearch()
