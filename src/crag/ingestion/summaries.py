"""Document summaries, written at ingest for the summary retriever (`crag.steps.document_summaries`).

Every new document gets a summary: with a model, llama-index's own `DocumentSummaryIndex`
recipe (its summary query through a tree-summarize response synthesizer), concurrently;
offline, an extractive summary (the document's most central sentences). Which one the settings
ask for: `crag.ingestion.configured.summarizer_for`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections import Counter
from collections.abc import Sequence

from llama_index.core.indices.document_summary.base import DEFAULT_SUMMARY_QUERY
from llama_index.core.llms import LLM
from llama_index.core.response_synthesizers import ResponseMode, get_response_synthesizer
from llama_index.core.schema import Document, NodeWithScore

from crag.errors import IngestError, redact
from crag.ingestion import ProgressCallback
from crag.text import sentences, terms

logger = logging.getLogger(__name__)

SUMMARY_SENTENCES = 3  # extractive summaries: at most this many sentences...
SUMMARY_CHARS = 600  # ...and about this many characters
SUMMARY_CONCURRENCY = 8  # documents summarized by the model at once


_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t].*$", re.MULTILINE)


def extractive_summary(
    text: str, title: str | None = None, *, max_sentences: int = SUMMARY_SENTENCES, max_chars: int = SUMMARY_CHARS
) -> str:
    """The document's most central sentences, in document order, after its title.

    A sentence is central when it holds many of the document's frequent terms (the title's
    count double: they name what the document is about). Sentences are picked greedily, a
    term counting half once a picked sentence covers it, so the summary does not repeat
    itself. Depends on the document alone: the same text always gives the same summary.
    """
    # Markdown headings would be glued to the sentence after them; the title leads anyway.
    candidates = sentences(_HEADING.sub("\n", text))
    sentence_terms = [set(terms(s)) for s in candidates]
    weight = Counter(terms(text))
    for term in set(terms(title)) if title else ():
        weight[term] *= 2
    covered: set[str] = set()
    chosen: list[int] = []
    budget = max_chars - (len(title) + 1 if title else 0)

    def gain(i: int) -> float:
        unique = sentence_terms[i]
        if not unique:
            return 0.0
        total = sum(math.log1p(weight[t]) * (0.5 if t in covered else 1.0) for t in unique)
        return total / math.sqrt(len(unique))  # favours dense sentences, not merely long ones

    while len(chosen) < max_sentences and budget > 0:
        left = [i for i in range(len(candidates)) if i not in chosen]
        if not left:
            break
        best = max(left, key=lambda i: (gain(i), -i))
        if gain(best) == 0.0 or (chosen and len(candidates[best]) > budget):
            break
        chosen.append(best)
        covered |= sentence_terms[best]
        budget -= len(candidates[best]) + 1
    body = " ".join(candidates[i] for i in sorted(chosen))
    if len(body) > max_chars:  # one very long first sentence
        body = body[:max_chars].rsplit(" ", 1)[0] + "…"
    return _titled(body, title)


def _titled(summary: str, title: str | None) -> str:
    summary = summary.strip()
    if not title or summary.lower().startswith(title.lower()):
        return summary
    return f"{title}\n{summary}" if summary else title


class ExtractiveSummarizer:
    """Offline summaries at ingest: `extractive_summary` of each document."""

    def __call__(self, documents: list[Document]) -> dict[str, str]:
        return {d.doc_id: extractive_summary(d.get_content(), d.metadata.get("title")) for d in documents}


class LLMSummarizer:
    """Summaries by a language model, with `DocumentSummaryIndex`'s summary query and its
    tree-summarize synthesizer (a long document is summarized in parts, then as a whole).

    Up to `concurrency` documents at once. A failed call raises `IngestError` before
    anything is written, so the index on disk stays as it was.
    """

    def __init__(
        self,
        llm: LLM,
        *,
        concurrency: int = SUMMARY_CONCURRENCY,
        progress: ProgressCallback | None = None,
        summary_query: str = DEFAULT_SUMMARY_QUERY,
    ) -> None:
        self.synthesizer = get_response_synthesizer(llm=llm, response_mode=ResponseMode.TREE_SUMMARIZE)
        self.concurrency = concurrency
        self.progress = progress
        self.summary_query = summary_query

    def __call__(self, documents: list[Document]) -> dict[str, str]:
        from crag._offload import run_sync

        return run_sync(lambda: self.asummarize(documents))

    async def asummarize(self, documents: Sequence[Document]) -> dict[str, str]:
        """A summary per document id."""
        limit = asyncio.Semaphore(self.concurrency)
        done = 0
        if self.progress:
            self.progress("summarize", 0, len(documents))

        async def one(document: Document) -> tuple[str, str]:
            nonlocal done
            async with limit:
                try:
                    response = await self.synthesizer.asynthesize(
                        self.summary_query, nodes=[NodeWithScore(node=document)]
                    )
                except Exception as exc:  # noqa: BLE001 - any failure of the model call
                    raise IngestError(
                        f"Summarizing document {_named(document)} failed "
                        f"({redact(f'{type(exc).__name__}: {exc}')[:300]}); nothing was written, "
                        "the index is as it was."
                    ) from None
            text = str(response.response or "").strip()
            if not text:
                raise IngestError(f"The model's summary of document {_named(document)} is empty; nothing was written.")
            done += 1
            if self.progress:
                self.progress("summarize", done, len(documents))
            return document.doc_id, _titled(text, document.metadata.get("title"))

        return dict(await asyncio.gather(*(one(d) for d in documents)))


def _named(document: Document) -> str:
    """A document as a person knows it: its file's name or its title, then its id (a hash)."""
    name = document.metadata.get("file_name") or document.metadata.get("title")
    return f"{name!r} ({document.doc_id})" if name else document.doc_id
