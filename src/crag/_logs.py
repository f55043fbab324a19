"""Logging that a dependency outage cannot turn into a flood: said once, then at intervals.

While PostgreSQL was down, `crag serve` logged on every attempt: its own upkeep every beat,
asyncpg's pool and the run store's LISTEN connection on every reconnect, each of those two
with a traceback that the MCP SDK's handler (`logging.basicConfig` with rich tracebacks,
installed on the root logger when the MCP server was built) drew as a framed panel with
source lines, on the event loop. Under load a panel took seconds to draw, /health waited
behind it, and a server whose stderr was a pipe nobody read (a test's) stopped dead once the
pipe was full: 3,650 lines in one outage. Now each kind of failure is said once, then at
most once every `every` seconds with how many were not said, and once when it passes; a
library's warning is one line, its exception named at the end.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

EVERY = 60.0  # seconds between two lines about the same outage


@dataclass
class _Outage:
    since: float  # when it was first said
    said: float  # when it was last said
    unsaid: int = 0  # failures since then, not said
    failures: int = 1


class Outages:
    """Says each kind of failure once, then at most once every `every` seconds (with how many
    went unsaid), and once when it passes.

    Example:
        outages = Outages(print)
        outages.failed("beat", "ConnectionRefusedError: ...")  # said
        outages.failed("beat", "ConnectionRefusedError: ...")  # counted, not said
        outages.passed("beat")                                  # "beat works again ..."
    """

    def __init__(self, say: Callable[[str], None], every: float = EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.say, self.every, self.clock = say, every, clock
        self.open: dict[str, _Outage] = {}

    def failed(self, what: str, reason: str) -> None:
        now = self.clock()
        outage = self.open.get(what)
        if outage is None:
            self.open[what] = _Outage(since=now, said=now)
            self.say(f"{what} failed: {reason} (said again every {self.every:g} s while it lasts)")
            return
        outage.failures += 1
        if now - outage.said < self.every:
            outage.unsaid += 1
            return
        self.say(f"{what} still failing, {outage.failures} times in {now - outage.since:.0f} s: {reason}")
        outage.said, outage.unsaid = now, 0

    def passed(self, what: str) -> None:
        outage = self.open.pop(what, None)
        if outage is not None:
            self.say(f"{what} works again, after {outage.failures} failure(s) "
                     f"in {self.clock() - outage.since:.0f} s")


class OnceInAWhile(logging.Filter):
    """A handler's filter: a record with the same logger and message template as one let
    through less than `every` seconds ago is dropped (counted, and the count said with the
    next one let through); an exception's traceback becomes its last line."""

    def __init__(self, every: float = EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every, self.clock = every, clock
        self.seen: dict[tuple[str, object], tuple[float, int]] = {}  # -> when let through, dropped since

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True  # information (uvicorn's startup, a recovery) is not repeated in a loop
        key, now = (record.name, record.msg), self.clock()
        last = self.seen.get(key)
        if last is not None and now - last[0] < self.every:
            self.seen[key] = (last[0], last[1] + 1)
            return False
        message = record.getMessage()
        if last is not None and last[1]:
            message += f" ({last[1]} more like it in the last {now - last[0]:.0f} s)"
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            message += f": {type(exc).__name__}: {exc}"
        record.msg, record.args, record.exc_info, record.exc_text = message, None, None, None
        self.seen[key] = (now, 0)
        return True


def log_plainly(stream: TextIO | None = None, every: float = EVERY) -> None:
    """For a process that serves (the command owns it): warnings from every library as plain
    lines on `stream` (stderr), each kind at most once every `every` seconds. Set before the
    libraries are built, so that one that configures logging only when none is (the MCP SDK)
    finds it done."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
    handler.addFilter(OnceInAWhile(every))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


@contextmanager
def root_logging_kept() -> Iterator[None]:
    """Leave the root logger as it was found: a library that calls `logging.basicConfig` as it
    is imported or built (wordllama at INFO, the MCP SDK with rich tracebacks) would otherwise
    set, for every library in the host process, what only its application should choose."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
