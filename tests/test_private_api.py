"""The private parts of dependencies that `crag/_compat/` uses are still there, as used.

Each failure names the dependency and its installed version, so an upgrade that moves one of
them is caught here, with the place to fix it, and not as an AttributeError in a run.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest

# (distribution, module, name): what crag/_compat imports or overrides.
USED = [
    ("openai", "openai._constants", "DEFAULT_CONNECTION_LIMITS"),
    ("openai", "openai", "OpenAI._make_status_error"),
    ("openai", "openai", "AsyncOpenAI._make_status_error"),
    ("llama-index-llms-openai", "llama_index.llms.openai", "OpenAI._get_credential_kwargs"),
    ("llama-index-llms-openai", "llama_index.llms.openai", "OpenAI._get_client"),
    ("llama-index-llms-openai", "llama_index.llms.openai", "OpenAI._get_aclient"),
    ("llama-index-llms-openai", "llama_index.llms.openai", "OpenAI._achat"),
    ("llama-index-llms-openai", "llama_index.llms.openai", "OpenAI._get_model_kwargs"),
    ("llama-agents-server", "llama_agents.server._runtime.persistence_runtime",
     "RESUME_FRESH_HANDLER_GRACE"),
    ("llama-agents-server", "llama_agents.server._service", "handler_data_from_persistent"),
    ("llama-agents-server", "llama_agents.server._store.abstract_workflow_store", "StoredEvent"),
    ("llama-agents-server", "llama_agents.server._store.abstract_workflow_store", "StoredTick"),
    ("llama-agents-server", "llama_agents.server._store.abstract_workflow_store",
     "is_terminal_status"),
    ("llama-agents-server", "llama_agents.server._store.postgres_workflow_store",
     "PostgresWorkflowStore"),
    ("llama-agents-server", "llama_agents.server", "AbstractWorkflowStore._evict_run_state_stores"),
    ("llama-agents-server", "llama_agents.server", "SqliteWorkflowStore._build_state_store"),
    ("llama-agents-server", "llama_agents.server", "SqliteWorkflowStore._connect"),
    ("llama-agents-server", "llama_agents.server._store.postgres_workflow_store",
     "PostgresWorkflowStore._build_state_store"),
    ("llama-agents-server", "llama_agents.server._store.postgres_workflow_store",
     "PostgresWorkflowStore._ensure_pool"),
    ("llama-agents-server", "llama_agents.server._service", "HandlerAlreadyRunningError"),
    ("llama-agents-server", "llama_agents.server._service", "_WorkflowService.start_workflow"),
    ("llama-agents-server", "llama_agents.server._service", "_WorkflowService._workflow_run_handler"),
    ("llama-index-workflows", "workflows", "Workflow._get_steps"),
    ("llama-index-workflows", "workflows", "Workflow._step_functions_version"),
    ("llama-index-core", "llama_index.core.postprocessor.types",
     "BaseNodePostprocessor._apostprocess_nodes"),
]

# Overridden methods whose parameters crag's overrides repeat.
SIGNATURES = {
    ("llama-index-llms-openai", "llama_index.llms.openai", "OpenAI._get_credential_kwargs"):
        ["self", "is_async"],
    ("llama-index-llms-openai", "llama_index.llms.openai", "OpenAI._achat"):
        ["self", "messages", "kwargs"],
    ("openai", "openai", "OpenAI._make_status_error"): ["self", "err_msg", "body", "response"],
    ("llama-agents-server", "llama_agents.server", "AbstractWorkflowStore._evict_run_state_stores"):
        ["self", "run_id"],
    ("llama-agents-server", "llama_agents.server", "SqliteWorkflowStore._build_state_store"):
        ["self", "run_id", "namespace", "state_type", "serializer"],
    ("llama-agents-server", "llama_agents.server", "SqliteWorkflowStore._connect"): ["self"],
    ("llama-index-workflows", "workflows", "Workflow._get_steps"): ["self"],
    # called, not overridden (crag._compat.workflow_server.start_run), by keyword
    ("llama-agents-server", "llama_agents.server._service", "_WorkflowService.start_workflow"):
        ["self", "workflow", "handler_id", "start_event", "context"],
    ("llama-agents-server", "llama_agents.server._service", "_WorkflowService._workflow_run_handler"):
        ["self", "workflow_name", "run_id"],
}

# What SqliteOnOneConnection.run_base runs to its end without an event loop: coroutines that
# must never await.
NEVER_AWAIT = ["query", "update", "delete", "query_events", "append_tick", "get_ticks"]


def _lookup(module: str, dotted: str) -> object:
    found: object = importlib.import_module(module)
    for part in dotted.split("."):
        found = getattr(found, part)
    return found


@pytest.mark.parametrize(("dist", "module", "name"), USED, ids=[f"{m}.{n}" for _, m, n in USED])
def test_a_private_name_used_by_compat_is_still_there(dist: str, module: str, name: str) -> None:
    try:
        _lookup(module, name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{dist} {version(dist)} no longer has {module}.{name} ({exc}): "
                    "update crag/_compat/ for this release.")


@pytest.mark.parametrize(("key", "params"), SIGNATURES.items(), ids=[k[2] for k in SIGNATURES])
def test_an_overridden_private_method_takes_the_same_parameters(
    key: tuple[str, str, str], params: list[str]
) -> None:
    dist, module, name = key
    found = list(inspect.signature(_lookup(module, name)).parameters)
    assert found == params, (f"{dist} {version(dist)} changed {module}.{name}{tuple(found)}: "
                             "crag/_compat/ overrides it with the old parameters.")


@pytest.mark.parametrize("name", NEVER_AWAIT)
def test_the_sqlite_stores_methods_crag_runs_on_its_thread_never_await(name: str) -> None:
    from llama_agents.server import SqliteWorkflowStore

    method = getattr(SqliteWorkflowStore, name)
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    awaits = [n for n in ast.walk(tree) if isinstance(n, (ast.Await, ast.AsyncFor, ast.AsyncWith))]
    assert inspect.iscoroutinefunction(method) and not awaits, (
        f"llama-agents-server {version('llama-agents-server')}: SqliteWorkflowStore.{name} now "
        "awaits, and crag/_compat/llama_agents.py runs it to its end on the store's thread.")


def test_the_stores_keep_the_private_state_crag_reads(tmp_path: Path) -> None:
    from llama_agents.server import SqliteWorkflowStore

    store = SqliteWorkflowStore(str(tmp_path / "server.db"))
    missing = [a for a in ("_state_store_cache", "_conditions") if not hasattr(store, a)]
    assert missing == [], (f"llama-agents-server {version('llama-agents-server')}: "
                           f"SqliteWorkflowStore has no {missing}; update crag/_compat/llama_agents.py.")


def test_the_workflow_server_keeps_the_run_service_crag_starts_runs_with() -> None:
    from llama_agents.server import WorkflowServer
    from llama_agents.server._service import _WorkflowService

    assert isinstance(WorkflowServer()._service, _WorkflowService), (
        f"llama-agents-server {version('llama-agents-server')}: WorkflowServer._service moved; "
        "update crag/_compat/workflow_server.py")


def test_the_instance_attributes_compat_reads_are_still_there() -> None:
    """python-pptx's paragraph element and NLTK Punkt's parameters: set on instances, so the
    lookup above cannot see them; a built paragraph and tokenizer must still carry them."""
    import pptx
    from crag._compat.pptx import paragraph_properties
    from crag.text import sentences

    slide = pptx.Presentation().slides.add_slide(pptx.Presentation().slide_layouts[1])
    paragraph = slide.placeholders[1].text_frame.paragraphs[0]
    paragraph.level = 1  # writes an a:pPr
    assert paragraph_properties(paragraph) is not None, f"python-pptx {version('python-pptx')}"
    # crag.text's Punkt learns "e.g." through add_abbreviations: without it the sentence ends there.
    said = sentences("Use a tool (e.g. pypdf) here. Then stop.")
    assert said == ["Use a tool (e.g. pypdf) here.", "Then stop."], f"nltk {version('nltk')}"
