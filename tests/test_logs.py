"""A dependency outage is said once, then at intervals, and once when it passes; a library's
warning repeated in a loop is one line a minute, its traceback cut to the exception's line;
building the MCP server leaves the host's root logger as it was."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from crag._logs import OnceInAWhile, Outages, log_plainly, root_logging_kept


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_said_once_then_once_a_minute_then_when_it_passes() -> None:
    said: list[str] = []
    clock = Clock()
    outages = Outages(said.append, every=60.0, clock=clock)

    for second in range(0, 150, 1):  # a beat a second, failing for 150 s
        clock.now = float(second)
        outages.failed("upkeep (beat)", "ConnectionRefusedError: [Errno 111]")
    outages.passed("upkeep (beat)")
    outages.passed("upkeep (beat)")  # working on: nothing more to say

    assert len(said) == 4
    assert said[0].startswith("upkeep (beat) failed: ConnectionRefusedError")
    assert "still failing, 61 times in 60 s" in said[1] and "121 times in 120 s" in said[2]
    assert said[3] == "upkeep (beat) works again, after 150 failure(s) in 149 s"


def test_two_failing_things_are_two_outages() -> None:
    said: list[str] = []
    outages = Outages(said.append, clock=Clock())
    outages.failed("beat", "down")
    outages.failed("prune", "down")
    outages.failed("beat", "down")
    assert [line.split(" failed")[0] for line in said] == ["beat", "prune"]


def _record(name: str, msg: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, args,
                             (type(exc), exc, None) if exc else None)


def test_a_library_warning_in_a_retry_loop_passes_once_a_minute_in_one_line() -> None:
    clock = Clock()
    once = OnceInAWhile(every=60.0, clock=clock)
    refused = ConnectionRefusedError(111, "Connect call failed")
    passed = []
    for second in range(0, 70, 2):
        clock.now = float(second)
        record = _record("asyncpg.pool", "Failed to restore the pool connection floor; retrying", exc=refused)
        if once.filter(record):
            passed.append(record)

    assert len(passed) == 2  # at 0 s and at 60 s
    assert passed[0].exc_info is None and passed[0].getMessage() == (
        "Failed to restore the pool connection floor; retrying: ConnectionRefusedError: [Errno 111] Connect call failed")
    assert "(29 more like it in the last 60 s)" in passed[1].getMessage()


def test_the_same_template_with_other_arguments_counts_as_a_repeat_and_others_pass() -> None:
    once = OnceInAWhile(clock=Clock())
    assert once.filter(_record("store", "retrying in %.1fs", 0.5))
    assert not once.filter(_record("store", "retrying in %.1fs", 1.0))
    assert once.filter(_record("store", "LISTEN connection dropped"))
    assert once.filter(_record("other", "retrying in %.1fs", 1.0))
    info = _record("store", "retrying in %.1fs", 2.0)
    info.levelno = logging.INFO
    assert once.filter(info)


@contextmanager
def bare_root_logger() -> Iterator[logging.Logger]:
    """The root logger with no handlers (pytest's own taken off), as in a fresh process;
    restored as it was on exit."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    root.handlers[:] = []
    try:
        yield root
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_a_serving_process_logs_a_library_warning_as_one_plain_line() -> None:
    stream = io.StringIO()
    with bare_root_logger():
        log_plainly(stream)
        try:
            raise ConnectionRefusedError(111, "Connect call failed")
        except ConnectionRefusedError:
            for _ in range(3):
                logging.getLogger("asyncpg.pool").warning("Failed to restore the pool connection floor", exc_info=True)
    assert stream.getvalue().splitlines() == [
        "WARNING:     asyncpg.pool: Failed to restore the pool connection floor: "
        "ConnectionRefusedError: [Errno 111] Connect call failed"]


def test_building_the_mcp_server_leaves_the_root_logger_as_it_was() -> None:
    pytest.importorskip("mcp")
    from crag.app.mcp_server import build_mcp

    with bare_root_logger() as root:
        level = root.level
        build_mcp(engine=None)  # type: ignore[arg-type] - the engine is used by the tools only
        assert (root.handlers, root.level) == ([], level)


def test_root_logging_kept_undoes_what_a_library_sets() -> None:
    with bare_root_logger() as root:
        level = root.level
        with root_logging_kept():
            logging.basicConfig(level=logging.INFO)  # as wordllama does when imported
            assert root.handlers
        assert (root.handlers, root.level) == ([], level)
