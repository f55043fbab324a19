"""Runs that ended in this process while the run store refused to record their end.

A run's last write (its status and result) can fail: the disk is full, PostgreSQL is down or
frozen. The server retries it a few times, then gives up; the run has ended, but its row
still says `running`, and would until the store took a write again. So each store keeps
the ends it could not record, and reads them over its rows: a client asking about such a
run is told at once that it failed, and why; the orphan sweep (ops/upkeep.py) writes that failure
into the store as soon as the store takes writes again, and the note is dropped.
"""

from __future__ import annotations

from datetime import datetime, timezone

from llama_agents.server import PersistentHandler

from crag._compat.llama_agents import is_terminal_status


class UnrecordedEnds:
    """run id -> the error to report, for the runs whose end the store refused."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.errors: dict[str, str] = {}

    def refused(self, handler: PersistentHandler, exc: BaseException) -> None:
        """The store refused `handler`'s write; note it if the write was the run's end."""
        if handler.run_id and is_terminal_status(handler.status):
            reason = str(exc) or type(exc).__name__
            self.errors.setdefault(  # the first refusal says how the run ended; the
                handler.run_id,  # sweep's own refused retries must not rewrite it
                f"the run ended ({handler.status}) but the {self.kind} run store could not "
                f"record it ({reason}); its result is lost: ask again",
            )

    def cleaned(self, handler: PersistentHandler) -> PersistentHandler:
        """`handler` without the noted error a read put on it, when a retried write of the
        run's end now says it completed or was cancelled."""
        noted = self.errors.get(handler.run_id or "")
        if noted is not None and handler.error == noted and handler.status != "failed":
            return handler.model_copy(update={"error": None})
        return handler

    def recorded(self, handler: PersistentHandler) -> None:
        """The store took `handler`'s write; a noted end of the same run is no longer needed."""
        if handler.run_id and is_terminal_status(handler.status):
            self.errors.pop(handler.run_id, None)

    def over(self, handlers: list[PersistentHandler]) -> list[PersistentHandler]:
        """`handlers` as read, each noted run that still reads `running` shown failed."""
        if not self.errors:
            return handlers
        return [
            self._failed(h) if h.status == "running" and h.run_id in self.errors else h
            for h in handlers
        ]

    def _failed(self, handler: PersistentHandler) -> PersistentHandler:
        now = datetime.now(timezone.utc)
        return handler.model_copy(
            update={"status": "failed", "error": self.errors[handler.run_id], "completed_at": now}
        )
