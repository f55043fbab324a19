"""Postprocessing stages between retrieve and grade: filter, rescore, reorder, rewrite chunks.

    stage              implementation
    similarity_cutoff  SimilarityPostprocessor on the WordLlama cosine of query and chunk
    keywords           KeywordFilter: whole words, case-insensitive, on crag's analyzer
    sentence_window    MetadataReplacementPostProcessor(target_metadata_key="window")
    rerank             crag.steps.reranking.reranker_for (keeps `top_n`: retriever.top_k)
    optimizer          SentenceEmbeddingOptimizer with WordLlama and crag's Punkt sentences
    reorder            LongContextReorder: the best chunks at both ends

`postprocessors_for(options, ...)` builds the stages `options.stages` lists, in order (the
wiring passes `[postprocess]`'s values); `LlamaIndexPostprocessor` adapts any llama-index
`BaseNodePostprocessor`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field
from llama_index.core.postprocessor import (
    LongContextReorder,
    MetadataReplacementPostProcessor,
    SentenceEmbeddingOptimizer,
    SimilarityPostprocessor,
)
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from crag import text
from crag._compat.llama_index import has_own_async_path
from crag._offload import off_loop, warm_up
from crag.errors import ConfigError, CragError, StepError
from crag.ingestion.chunkers.sentence_window import WINDOW_KEY, built_with_windows
from crag.interfaces import Grader, Postprocessor
from crag.models import LLMFactory
from crag.text import sentences, words


class LlamaIndexPostprocessor:
    """Adapts any llama-index `BaseNodePostprocessor` to crag's `Postprocessor` Protocol.

    Args:
        postprocessor: called as `apostprocess_nodes(nodes, query_str=query)`.
        name: what errors and the trace call this stage (default: the class name).
    """

    def __init__(self, postprocessor: BaseNodePostprocessor, *, name: str | None = None) -> None:
        self.postprocessor = postprocessor
        self.name = name or type(postprocessor).__name__
        # One without its own async path only computes: all of it, copies included, runs in
        # crag's pool (llama-index's default would send it to asyncio's, a second pool).
        self._sync_only = not has_own_async_path(postprocessor)

    def warm_up(self) -> None:
        warm_up(self.postprocessor)

    async def postprocess(self, query: str, chunks: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        if self._sync_only:
            return await off_loop(self._postprocess, query, chunks)
        copies = await off_loop(_copies, chunks)
        return await self.postprocessor.apostprocess_nodes(copies, query_str=query)

    def _postprocess(self, query: str, chunks: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        return self.postprocessor.postprocess_nodes(_copies(chunks), query_str=query)


def _copies(chunks: Sequence[NodeWithScore]) -> list[NodeWithScore]:
    """Deep copies: several llama-index postprocessors rewrite node text in place (window
    replacement, the optimizer), and the chunks are the index's own, shared by every run."""
    return [NodeWithScore(node=c.node.model_copy(deep=True), score=c.score) for c in chunks]


class EmbeddingSimilarityCutoff:
    """Drops chunks whose embedding cosine to the query is below `cutoff`.

    The default retriever's scores are reciprocal-rank-fusion values (about 0.01 to 0.03),
    on which no cutoff means anything, so every chunk is rescored here by the cosine
    similarity of its text and the query (WordLlama: near 0 for unrelated text, 0.6 to 0.8
    for a sentence on the question's topic) and `SimilarityPostprocessor` filters on that. The kept
    chunks keep the retriever's scores and order: later stages (reorder) rank by those.
    """

    name = "similarity_cutoff"

    def __init__(self, embed_model: BaseEmbedding, cutoff: float) -> None:
        self.embed_model = embed_model
        self.filter = SimilarityPostprocessor(similarity_cutoff=cutoff)

    def warm_up(self) -> None:
        warm_up(self.embed_model)

    async def postprocess(self, query: str, chunks: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        return await off_loop(self._postprocess, query, chunks)

    def _postprocess(self, query: str, chunks: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        if not chunks:
            return []
        cosines = self.cosines(query, [c.node.get_content() for c in chunks])
        rescored = [NodeWithScore(node=c.node, score=s) for c, s in zip(chunks, cosines)]
        kept = {id(n.node) for n in self.filter.postprocess_nodes(rescored, query_str=query)}
        return [c for c in chunks if id(c.node) in kept]

    def cosines(self, query: str, texts: list[str]) -> list[float]:
        """The cosine similarity of the query to each text."""
        asked = self.embed_model.get_query_embedding(query)
        vectors = self.embed_model.get_text_embedding_batch(texts)
        return [float(self.embed_model.similarity(asked, v)) for v in vectors]


class KeywordFilter(BaseNodePostprocessor):
    """Keeps chunks holding at least one required keyword and none of the excluded ones.

    The semantics of llama-index's `KeywordNodePostprocessor`, matched on crag's analyzer
    (`crag.text.words`) rather than spaCy's: whole words, case-insensitive, a keyword of
    several words matching them in sequence ("lithium ion" matches "Lithium-ion").
    The library's matcher is case-sensitive ("warranty" misses "Warranty") and spaCy
    would add some 55 MB of wheels for a tokenizer this needs none of.
    """

    required_keywords: list[str] = Field(default_factory=list)
    exclude_keywords: list[str] = Field(default_factory=list)

    def model_post_init(self, context: object) -> None:
        for keyword in (*self.required_keywords, *self.exclude_keywords):
            if not words(keyword):
                raise ConfigError(f"Keyword {keyword!r} has no letters or digits to match.")

    @classmethod
    def class_name(cls) -> str:
        return "KeywordFilter"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        required = [_phrase(k) for k in self.required_keywords]
        excluded = [_phrase(k) for k in self.exclude_keywords]
        kept = []
        for node in nodes:
            text = _phrase(node.node.get_content())
            if required and not any(k in text for k in required):
                continue
            if any(k in text for k in excluded):
                continue
            kept.append(node)
        return kept


def _phrase(text: str) -> str:
    """Lower-cased words between single spaces, padded, so `in` matches whole words only."""
    return f" {' '.join(words(text))} "


class SentenceOptimizer:
    """Shortens each chunk to its sentences most similar to the query, with their context.

    llama-index's `SentenceEmbeddingOptimizer` does the selection, with crag's sentence
    splitter (its default is an untrained Punkt that splits "U.S." apart). It reads a
    node's text with its metadata and writes that back as the text, so each node is handed
    over with its metadata hidden. A chunk of which no sentence reaches the threshold is
    dropped: nothing in it is similar enough to keep (the library raises instead).
    """

    name = "optimizer"

    def __init__(
        self,
        embed_model: BaseEmbedding,
        *,
        percentile: float | None = 0.5,
        threshold: float | None = None,
        context_before: int = 1,
        context_after: int = 1,
    ) -> None:
        if percentile is None and threshold is None:
            raise ConfigError(
                "The optimizer stage needs postprocess.optimizer_percentile or optimizer_threshold."
            )
        self.embed_model = embed_model
        self.optimizer = SentenceEmbeddingOptimizer(
            embed_model=embed_model,
            percentile_cutoff=percentile,
            threshold_cutoff=threshold,
            tokenizer_fn=sentences,
            context_before=context_before,
            context_after=context_after,
        )

    def warm_up(self) -> None:
        text.warm_up()
        warm_up(self.embed_model)

    async def postprocess(self, query: str, chunks: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        return await off_loop(self._optimize, QueryBundle(query), list(chunks))

    def _optimize(self, query: QueryBundle, chunks: list[NodeWithScore]) -> list[NodeWithScore]:
        kept = []
        for chunk in chunks:
            node = chunk.node.model_copy(deep=True)
            shown = list(node.excluded_llm_metadata_keys)
            node.excluded_llm_metadata_keys = list(node.metadata)
            try:
                # One chunk at a time, so a chunk with nothing to keep drops alone; the
                # query bundle keeps its embedding between calls.
                (optimized,) = self.optimizer.postprocess_nodes(
                    [NodeWithScore(node=node, score=chunk.score)], query_bundle=query
                )
            except ValueError as exc:
                if "zero sentences" in str(exc):
                    continue
                raise
            optimized.node.excluded_llm_metadata_keys = shown
            kept.append(optimized)
        return kept


@dataclass(frozen=True)
class PostprocessOptions:
    """The stages and what they are built with (`crag.toml`'s `[postprocess]` gives these, with
    `[grader] concurrency` as `rerank_concurrency`; the defaults are the same).

    Args:
        stages: the stages, in the order they run.
        similarity_cutoff: the similarity_cutoff stage drops chunks below this cosine.
        required_keywords, exclude_keywords: the keywords stage's words.
        rerank: the reranker, "auto", "lexical" or "llm" (`crag.steps.reranking.reranker_for`).
        rerank_depth: with a rerank stage, the retriever returns this many chunks.
        rerank_batch_size, rerank_concurrency: chunks per rerank prompt; prompts in flight.
        optimizer_percentile, optimizer_threshold: the optimizer keeps this top share of
            sentences, or those at least this similar to the query.
        context_before, context_after: sentences kept around each one the optimizer keeps.
    """

    stages: Sequence[str] = ()
    similarity_cutoff: float = 0.0
    required_keywords: Sequence[str] = ()
    exclude_keywords: Sequence[str] = ()
    rerank: str = "auto"
    rerank_depth: int = 40
    rerank_batch_size: int = 10
    rerank_concurrency: int = 32
    optimizer_percentile: float | None = 0.5
    optimizer_threshold: float | None = None
    context_before: int = 1
    context_after: int = 1


def postprocessors_for(
    options: PostprocessOptions,
    *,
    top_n: int,
    embed_model: BaseEmbedding,
    llms: LLMFactory,
    evaluator: Grader,
) -> list[Postprocessor]:
    """The stages `options.stages` names, built in the order listed; a rerank keeps `top_n`."""
    stages: list[Postprocessor] = []
    for stage in options.stages:
        if stage == "similarity_cutoff":
            stages.append(EmbeddingSimilarityCutoff(embed_model, options.similarity_cutoff))
        elif stage == "keywords":
            if not (options.required_keywords or options.exclude_keywords):
                raise ConfigError(
                    "The keywords stage needs postprocess.required_keywords or exclude_keywords "
                    "(--require / --exclude)."
                )
            keywords = KeywordFilter(
                required_keywords=list(options.required_keywords),
                exclude_keywords=list(options.exclude_keywords),
            )
            stages.append(LlamaIndexPostprocessor(keywords, name=stage))
        elif stage == "sentence_window":
            replace = MetadataReplacementPostProcessor(target_metadata_key=WINDOW_KEY)
            stages.append(LlamaIndexPostprocessor(replace, name=stage))
        elif stage == "rerank":
            from crag.steps.reranking import reranker_for

            reranker = reranker_for(
                options.rerank,
                llms=llms,
                evaluator=evaluator,
                embed_model=embed_model,
                top_n=top_n,
                batch_size=options.rerank_batch_size,
                concurrency=options.rerank_concurrency,
            )
            stages.append(reranker)
        elif stage == "optimizer":
            stages.append(
                SentenceOptimizer(
                    embed_model,
                    percentile=options.optimizer_percentile,
                    threshold=options.optimizer_threshold,
                    context_before=options.context_before,
                    context_after=options.context_after,
                )
            )
        elif stage == "reorder":
            stages.append(LlamaIndexPostprocessor(LongContextReorder(), name=stage))
        else:  # settings validation makes this unreachable; a new stage name must be built here
            raise ConfigError(f"Unknown postprocess stage {stage!r}.")
    return stages


def retrieval_depth(options: PostprocessOptions, top_k: int) -> int:
    """Chunks the retriever returns: `rerank_depth` before a rerank stage keeps `top_k`."""
    return options.rerank_depth if "rerank" in options.stages else top_k


def check_index(stages: Sequence[str], chunker: str) -> None:
    """ConfigError when a stage needs an index built another way than `chunker` says."""
    if "sentence_window" in stages and not built_with_windows(chunker):
        raise ConfigError(
            f"The sentence_window stage needs an index of sentence windows, but this one was "
            f"chunked by {chunker or 'sentence'!r}; re-ingest with: "
            "crag ingest DOCS --chunker sentence_window"
        )


def stage_name(stage: object) -> str:
    """What errors call a stage: its `name`, or its class name."""
    return getattr(stage, "name", None) or type(stage).__name__


async def apply_postprocessors(
    postprocessors: Sequence[Postprocessor], query: str, chunks: Sequence[NodeWithScore]
) -> list[NodeWithScore]:
    """Run the stages in order; a stage that raises fails with its name in the message."""
    out = list(chunks)
    for stage in postprocessors:
        try:
            out = list(await stage.postprocess(query, out))
        except CragError:
            raise
        except Exception as exc:  # any other failure of a stage: re-raised naming it
            raise StepError(f"postprocess/{stage_name(stage)}", exc) from exc
    return out
