"""The in-process side of llama-agents-server's `WorkflowServer` (written against 0.8.0).

The server starts a run for its HTTP routes through a service object it keeps private
(`WorkflowServer._service`): it records the run's handler in the store before the run starts,
so that every event and the end land under that handler. crag's own doors start runs the same
way without sending HTTP to themselves (`crag.app.runs`); the package offers no public
in-process equivalent, and its client (llama-agents-client) only speaks HTTP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llama_agents.server._service import HandlerAlreadyRunningError

if TYPE_CHECKING:
    from llama_agents.client.protocol import HandlerData
    from llama_agents.server import WorkflowServer
    from workflows import Workflow
    from workflows.events import StartEvent
    from workflows.handler import WorkflowHandler

__all__ = ["HandlerAlreadyRunningError", "start_run"]


async def start_run(
    server: WorkflowServer, workflow: Workflow, handler_id: str, start_event: StartEvent
) -> tuple[HandlerData, WorkflowHandler[Any]]:
    """Start `workflow` (registered on `server`) as the handler `handler_id`, recorded as a run
    started by the server's own run route is; its record as started, and the run's handler
    (awaitable, cancellable). `HandlerAlreadyRunningError` if that handler is running."""
    service = server._service
    data = await service.start_workflow(workflow=workflow, handler_id=handler_id, start_event=start_event)
    assert data.run_id is not None  # the service gives every run it starts an id
    return data, service._workflow_run_handler(data.workflow_name, data.run_id)
