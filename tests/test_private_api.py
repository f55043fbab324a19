"""The private parts of dependencies that `crag/_compat/` uses are still there, as used.

Each failure names the dependency and its installed version, so an upgrade that moves one of
them is caught here, with the place to fix it, and not as an AttributeError in a run.
"""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import version

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
]

# Overridden methods whose parameters crag's overrides repeat.
SIGNATURES = {
    ("llama-index-llms-openai", "llama_index.llms.openai", "OpenAI._get_credential_kwargs"):
        ["self", "is_async"],
    ("llama-index-llms-openai", "llama_index.llms.openai", "OpenAI._achat"):
        ["self", "messages", "kwargs"],
    ("openai", "openai", "OpenAI._make_status_error"): ["self", "err_msg", "body", "response"],
}


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
