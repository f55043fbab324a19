"""Query rewriters: question -> web search query."""

from __future__ import annotations

import re

from llama_index.core.llms import LLM

from crag.models.replies import ask
from crag.prompts import REWRITE_PROMPT
from crag.steps.query_checks import check_generated, instructions_of
from crag.text import STOPWORDS, words

# "How long", "how many"...: the adjective asks for the answer's type; searching for it
# finds pages that merely use the word.
_ANSWER_TYPE = re.compile(
    r"\bhow\s+(long|many|much|old|far|big|large|often|tall|high|fast|deep|wide|soon)\b", re.IGNORECASE
)


class KeywordRewriter:
    """Keeps the question's content words in order, without function and question words."""

    async def rewrite(self, query: str) -> str:
        seen: dict[str, None] = {}
        for word in words(_ANSWER_TYPE.sub(" ", query)):
            if word not in STOPWORDS and len(word) > 1 or word.isdigit():
                seen.setdefault(word, None)
        return " ".join(seen) or query.strip()


class LLMRewriter:
    """Asks a chat model for a keyword search query, at most `max_tokens` long.

    A reply that is no usable query (empty, cut at the limit, a ramble, an echo of the prompt,
    about something else: `crag.steps.query_checks`) raises, and the workflow's keyword
    rewriter stands in, saying why in the run's `degraded` list.
    """

    def __init__(self, llm: LLM, *, max_tokens: int | None = 48) -> None:
        self.llm = llm
        self.max_tokens = max_tokens

    async def rewrite(self, query: str) -> str:
        prompt = REWRITE_PROMPT.format(query=query)
        reply = await ask(self.llm, prompt, max_tokens=self.max_tokens, purpose="rewrite", stop=["\n\n"])
        return check_generated(
            first_line(reply), question=query, instructions=instructions_of(REWRITE_PROMPT.template), what="rewrite"
        )


def first_line(reply: str) -> str:
    """A one-line reply's line: the first that is not blank, without the quotes models add."""
    lines = [ln.strip().strip("\"'`") for ln in reply.splitlines()]
    return next((ln for ln in lines if ln), "")
