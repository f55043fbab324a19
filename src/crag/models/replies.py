"""One bounded model call for a structured purpose: a reply-length limit, stop sequences, and a
reply cut at the limit refused rather than read.

    text = await ask(llm, prompt, max_tokens=8, purpose="grade")

Real small models ramble, echo the prompt or never stop (issue 31: one wrote 293 tokens for a
grade, another ran until the server's context was full). A grade or a JSON list cut at its
limit is not what was asked for: `ReplyCutOff` says so, and the caller's fallback stands in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.llms import LLM, ChatMessage, ChatResponse

from crag.errors import ReplyCutOff


def finish_reason(response: ChatResponse | Any) -> str | None:
    """Why the server ended the reply ("stop", "length", ...), read from its raw JSON (a dict,
    or the SDK's object); None when the model gave none (a fake, a server that omits it)."""
    raw = getattr(response, "raw", None)
    if raw is None:
        return None
    choices = raw.get("choices") if isinstance(raw, dict) else getattr(raw, "choices", None)
    if not choices:
        return None
    first = choices[0]
    reason = first.get("finish_reason") if isinstance(first, dict) else getattr(first, "finish_reason", None)
    return str(reason) if reason else None


def limits(max_tokens: int | None, stop: Sequence[str] = ()) -> dict[str, Any]:
    """The call's keyword arguments for a reply-length limit and stop sequences (none when unset)."""
    kwargs: dict[str, Any] = {}
    if max_tokens is not None:
        kwargs["max_tokens"] = max_tokens
    if stop:
        kwargs["stop"] = list(stop)[:4]  # OpenAI takes at most four
    return kwargs


async def ask(
    llm: LLM, prompt: str, *, max_tokens: int | None, purpose: str, stop: Sequence[str] = ()
) -> str:
    """The model's reply to `prompt`, at most `max_tokens` long; `ReplyCutOff` when the server
    cut it at that limit (a structured reply missing its end is not read)."""
    reply = await llm.achat([ChatMessage(role="user", content=prompt)], **limits(max_tokens, stop))
    text = reply.message.content or ""
    if finish_reason(reply) == "length":
        raise ReplyCutOff(
            f"the {purpose} reply was cut at its {max_tokens}-token limit: {' '.join(text.split())[:60]!r}"
        )
    return text
