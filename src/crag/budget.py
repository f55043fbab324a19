"""A question's budget for model calls: calls, tokens and seconds, never exceeded.

The workflow opens a `Budget` for each run (`spending(budget)`); the model wrapper asks it before
every call (`charge_call`), so concurrent grading cannot overshoot: the check and the count are
one step under a lock. When the budget says no, the call raises `BudgetReached` before anything is
sent, and the component that wanted the model falls back to its offline counterpart, as it does
for any model failure; the run's notes then say "budget".
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from crag.errors import CragError


class BudgetReached(CragError):
    """A model call was refused because the question's budget is spent."""


@dataclass
class Budget:
    """Limits for one question (None: no limit) and what has been spent against them."""

    calls: int | None = None
    tokens: int | None = None
    seconds: float | None = None
    spent_calls: int = 0
    spent_tokens: int = 0
    refused: int = 0
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def limited(self) -> bool:
        return any(limit is not None for limit in (self.calls, self.tokens, self.seconds))

    def charge_call(self) -> None:
        """Count one model call about to be made, or raise `BudgetReached` if it may not be."""
        with self._lock:
            reason = self._spent_reason()
            if reason:
                self.refused += 1
                raise BudgetReached(f"budget reached ({reason}): the model was not called")
            self.spent_calls += 1

    def add_tokens(self, count: int) -> None:
        """Count tokens a finished call used (a call already made is never undone)."""
        with self._lock:
            self.spent_tokens += max(int(count), 0)

    def _spent_reason(self) -> str | None:
        if self.calls is not None and self.spent_calls >= self.calls:
            return f"{self.spent_calls} of {self.calls} calls"
        if self.tokens is not None and self.spent_tokens >= self.tokens:
            return f"{self.spent_tokens} of {self.tokens} tokens"
        if self.seconds is not None and time.monotonic() - self.started >= self.seconds:
            return f"{self.seconds:g} s"
        return None

    def note(self) -> str | None:
        """One line for the run's notes when the budget changed what the run did, else None."""
        if not self.refused:
            return None
        limits = ", ".join(
            f"{value:g} {name}" for name, value in
            (("calls", self.calls), ("tokens", self.tokens), ("s", self.seconds)) if value is not None
        )
        return (f"budget reached ({limits}): {self.refused} model call(s) not made; "
                "offline components stood in")


_current: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("crag_budget", default=None)


def current_budget() -> Budget | None:
    """The running question's budget, or None outside a run or when it has no limits."""
    return _current.get()


@contextmanager
def spending(budget: Budget | None) -> Iterator[Budget | None]:
    """Calls made inside this block (and tasks it starts) are charged to `budget`."""
    token = _current.set(budget if budget is not None and budget.limited else None)
    try:
        yield budget
    finally:
        _current.reset(token)
