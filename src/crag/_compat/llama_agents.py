"""Private parts of llama-agents-server that crag's service store builds on.

The server's public package exports the store base class and the handler record, but not the
query and event types its own stores use, the grace a resumed run is given, or the helper that
turns a stored handler into the API's view of it.
"""

from __future__ import annotations

from llama_agents.server._runtime.persistence_runtime import RESUME_FRESH_HANDLER_GRACE
from llama_agents.server._service import handler_data_from_persistent
from llama_agents.server._store.abstract_workflow_store import (
    StoredEvent,
    StoredTick,
    is_terminal_status,
)
from llama_agents.server._store.postgres_workflow_store import PostgresWorkflowStore

__all__ = [
    "RESUME_FRESH_HANDLER_GRACE",
    "PostgresWorkflowStore",
    "StoredEvent",
    "StoredTick",
    "handler_data_from_persistent",
    "is_terminal_status",
]
