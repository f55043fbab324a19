"""A question's budget for model calls: calls, tokens and seconds, never exceeded.

The workflow opens a `Budget` for each run (`spending(budget)`); the model wrapper asks it before
every call (`charge_call`), so concurrent grading cannot overshoot: the check and the count are
one step under a lock. When the budget says no, the call raises `BudgetReached` before anything is
sent, and the component that wanted the model falls back to its offline counterpart, as it does
for any model failure; the run's notes then say "budget".

A run also has a deadline for model calls (`deadline`): its time limit less what the offline
components need to answer. A call still running then is ended (`DeadlineReached`), its
retries and backoff included, and a call asked for after it is refused; the offline
components answer instead, within the run's limit. Without it a model that never stopped
used up the whole run, and no fallback ever started (issue 31).
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


class DeadlineReached(CragError):
    """A model call was ended, or refused, because the run's deadline for model calls came."""


@dataclass
class Budget:
    """Limits for one question (None: no limit) and what has been spent against them."""

    calls: int | None = None
    tokens: int | None = None
    seconds: float | None = None
    deadline: float | None = None  # time.monotonic() by which every model call has ended
    spent_calls: int = 0
    spent_tokens: int = 0
    spent_in: int = 0  # of spent_tokens, the prompts'
    estimated: bool = False  # some tokens were counted here: the server reported none
    refused: int = 0
    stopped: int = 0  # calls ended or refused at the deadline
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def limited(self) -> bool:
        return any(limit is not None for limit in (self.calls, self.tokens, self.seconds, self.deadline))

    def time_left(self) -> float | None:
        """Seconds until the deadline (never below 0), or None without one."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def calls_left(self) -> int | None:
        """Model calls this budget still allows, or None without a limit on calls."""
        return None if self.calls is None else max(0, self.calls - self.spent_calls)

    def charge_call(self) -> None:
        """Count one model call about to be made, or raise `BudgetReached` (or `DeadlineReached`)
        if it may not be."""
        with self._lock:
            if self.deadline is not None and time.monotonic() >= self.deadline:
                self.stopped += 1
                raise DeadlineReached("the run's deadline for model calls has passed: the model was not called")
            reason = self._spent_reason()
            if reason:
                self.refused += 1
                raise BudgetReached(f"budget reached ({reason}): the model was not called")
            self.spent_calls += 1

    def stop(self) -> None:
        """Count a call the deadline ended."""
        with self._lock:
            self.stopped += 1

    def add_tokens(self, count: int, *, prompt: int = 0, estimated: bool = False) -> None:
        """Count tokens a call used, `prompt` of them its prompt's (a call already made is never undone)."""
        with self._lock:
            self.spent_tokens += max(int(count), 0)
            self.spent_in += max(int(prompt), 0)
            self.estimated |= estimated

    def _spent_reason(self) -> str | None:
        if self.calls is not None and self.spent_calls >= self.calls:
            return f"{self.spent_calls} of {self.calls} calls"
        if self.tokens is not None and self.spent_tokens >= self.tokens:
            return f"{self.spent_tokens} of {self.tokens} tokens"
        if self.seconds is not None and time.monotonic() - self.started >= self.seconds:
            return f"{self.seconds:g} s"
        return None

    def notes(self) -> list[str]:
        """The run's notes: one line for the budget, one for the deadline, when they changed what
        the run did."""
        lines = [self.note()] if self.refused else []
        if self.stopped:
            lines.append(f"deadline: {self.stopped} model call(s) ended or not made at the run's deadline "
                         "for model calls; offline components stood in")
        return [line for line in lines if line]

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
    """The running question's budget, or None outside a run."""
    return _current.get()


@contextmanager
def spending(budget: Budget | None) -> Iterator[Budget | None]:
    """Calls made inside this block (and tasks it starts) are charged to `budget`, which counts
    them even when it has no limits (what a failed run spent is still known: `watching`)."""
    token = _current.set(budget)
    opened = _watched.get()
    if budget is not None and opened is not None:
        opened.append(budget)
    try:
        yield budget
    finally:
        _current.reset(token)


_watched: contextvars.ContextVar[list[Budget] | None] = contextvars.ContextVar("crag_watched", default=None)


@contextmanager
def watching() -> Iterator[list[Budget]]:
    """The budgets of the runs started inside this block: what they spent, even when a run
    timed out or failed before its cost record was written (`crag eval` counts them)."""
    opened: list[Budget] = []
    token = _watched.set(opened)
    try:
        yield opened
    finally:
        _watched.reset(token)
