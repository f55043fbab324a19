"""Checks `crag serve` makes once, before it accepts a request, so that a wrong setting fails
loudly at startup instead of degrading every run quietly.

A wrong model key would otherwise surface only inside runs: each grade falls back or fails
with the model server's 401, the server stays "healthy", and every answer is worse. One
`GET {base_url}/models` (free, no tokens) tells a refused key from a good one.
"""

from __future__ import annotations

import httpx

from crag.config import LLMSettings
from crag.errors import ConfigError

OPENAI_URL = "https://api.openai.com/v1"


def check_model_key(llm: LLMSettings, timeout: float = 5.0) -> None:
    """Raise ConfigError when the model server refuses the key (401 or 403).

    Anything else (no answer, a server without `/models`) is left to the runs: a local
    server may not list its models, and a network hiccup at startup is not a wrong key.
    """
    if not llm.configured:
        return
    base = (llm.base_url or OPENAI_URL).rstrip("/")
    headers = {"Authorization": f"Bearer {llm.api_key.get_secret_value()}"} if llm.api_key else {}
    try:
        reply = httpx.get(f"{base}/models", headers=headers, timeout=timeout)
    except httpx.HTTPError:
        return
    if reply.status_code in (401, 403):
        raise ConfigError(
            f"The model server at {base} refused the key ({reply.status_code}): check OPENAI_API_KEY "
            "(or [llm] api_key) and [llm] base_url; crag serve did not start."
        )
