"""What a run's model calls cost: calls, tokens in and out per step, cache hits, money.

The trace is the one source: every step's record counts its calls and tokens as they finish
(`crag.trace`), and `cost_of(trace)` reads them into the `CostRecord` that `crag ask --json`,
the trace page, `crag serve`'s run record and `crag eval` show. Token figures come from the
server's `usage`; a server that reports none has its tokens counted with the tokenizer, and
the record says `estimated`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field


class StepCost(BaseModel):
    """One step's share of a run's cost."""

    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cache_hits: int = 0
    estimated: bool = False


class CostRecord(BaseModel):
    """A run's model cost; `money` is set when `[llm] price_in` / `price_out` are."""

    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cache_hits: int = 0
    estimated: bool = Field(False, description="Some token counts were counted here, not reported.")
    money: float | None = Field(None, description="In the prices' currency, from tokens in and out.")
    per_step: dict[str, StepCost] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list, description="Budget notes, when one was reached.")

    def line(self) -> str:
        """The one line `crag ask` ends with."""
        parts = [f"cost: {self.calls} model call{'s' if self.calls != 1 else ''}",
                 f"{self.tokens_in:,} tokens in, {self.tokens_out:,} out"
                 + (" (estimated)" if self.estimated else "")]
        if self.cache_hits:
            parts.append(f"{self.cache_hits} cached grade{'s' if self.cache_hits != 1 else ''}")
        if self.money is not None:
            parts.append(f"${self.money:.6f}")
        return "; ".join([", ".join(parts), *self.notes])


def cost_of(steps: Iterable[Any], *, price_in: float | None = None, price_out: float | None = None,
            notes: Sequence[str] = ()) -> CostRecord:
    """The cost of a run's step records (`crag.trace.StepRecord`); prices per million tokens."""
    record = CostRecord(notes=list(notes))
    for step in steps:
        share = record.per_step.setdefault(step.name, StepCost())
        for part in step.walk():  # a hop's sub-steps count as the hop's
            share.calls += part.llm_calls
            share.tokens_in += part.prompt_tokens
            share.tokens_out += part.completion_tokens
            share.cache_hits += part.cache_hits
            share.estimated |= part.estimated_tokens
    record.per_step = {name: s for name, s in record.per_step.items() if s.calls or s.cache_hits}
    for share in record.per_step.values():
        record.calls += share.calls
        record.tokens_in += share.tokens_in
        record.tokens_out += share.tokens_out
        record.cache_hits += share.cache_hits
        record.estimated |= share.estimated
    if price_in is not None or price_out is not None:
        record.money = (record.tokens_in * (price_in or 0.0) + record.tokens_out * (price_out or 0.0)) / 1e6
    return record


def total(records: Iterable[CostRecord]) -> CostRecord:
    """Several runs' costs added up (`crag eval`'s totals)."""
    out = CostRecord()
    for r in records:
        out.calls += r.calls
        out.tokens_in += r.tokens_in
        out.tokens_out += r.tokens_out
        out.cache_hits += r.cache_hits
        out.estimated |= r.estimated
        if r.money is not None:
            out.money = (out.money or 0.0) + r.money
        for name, share in r.per_step.items():
            mine = out.per_step.setdefault(name, StepCost())
            mine.calls += share.calls
            mine.tokens_in += share.tokens_in
            mine.tokens_out += share.tokens_out
            mine.cache_hits += share.cache_hits
            mine.estimated |= share.estimated
    return out


@lru_cache(maxsize=1)
def _tokenizer():  # noqa: ANN202 - a function of a string
    # llama-index's tokenizer reads the tiktoken encodings bundled in llama-index-core (it points
    # TIKTOKEN_CACHE_DIR at them), so counting never downloads; tiktoken's own loader would.
    from llama_index.core.utils import get_tokenizer

    return get_tokenizer()


def load_tokenizer() -> None:
    """Load the tokenizer now (0.4 s, once a process), while building: a model's calls count
    tokens on the event loop, where a server reports none or a call ends without a reply."""
    _tokenizer()


def count_tokens(text: str) -> int:
    """Tokens in `text`, as OpenAI's tokenizer counts them (for servers that report none)."""
    return len(_tokenizer()(text)) if text else 0


def call_tokens(
    usage: Mapping[str, Any] | None, texts: Callable[[], tuple[str, str]]
) -> tuple[int, int, bool]:
    """One call's prompt and completion tokens: the server's `usage`, else `texts()` (the prompt
    and the reply, read only then) counted here, with True for "estimated"."""
    usage = usage or {}
    if usage.get("prompt_tokens") is None and usage.get("completion_tokens") is None:
        prompt, reply = texts()
        return count_tokens(prompt), count_tokens(reply), True
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), False


def messages_text(messages: Iterable[Any]) -> str:
    """A chat call's prompt as text: its messages' contents, one after another."""
    return "\n".join(str(m.content or "") for m in messages)
