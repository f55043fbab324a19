"""Query rewriters: question -> web search query."""

from __future__ import annotations

import re

from llama_index.core.llms import LLM, ChatMessage

from crag.prompts import REWRITE_PROMPT
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
    """Asks a chat model for a keyword search query; falls back to keywords on an empty reply."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.fallback = KeywordRewriter()

    async def rewrite(self, query: str) -> str:
        reply = await self.llm.achat([ChatMessage(role="user", content=REWRITE_PROMPT.format(query=query))])
        lines = [ln.strip().strip("\"'`") for ln in (reply.message.content or "").splitlines()]
        rewritten = next((ln for ln in lines if ln), "")
        return rewritten or await self.fallback.rewrite(query)
