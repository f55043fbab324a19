"""Reading an OpenAI chat completion request: the question, the conversation before it, and
whether to stream; anything unusable is a `BadRequest` naming the field, as OpenAI names it.

Only what crag can honour is read. Sampling settings (`temperature`, `max_tokens`...) are
accepted and ignored: crag's answer is written from the retrieved passages, not sampled. What
asks for another kind of reply (tool calls, JSON, several choices, log probabilities) is refused
by `refuse_unsupported`: ignored, it would leave a client waiting for what never comes (a
structured-output client reads `None` where it expected its object).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from crag.errors import CragError
from crag.events import Turn

MODEL_ID = "crag"
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


class BadRequest(CragError):
    """A request crag cannot answer: its status, message, and the field at fault."""

    def __init__(
        self, message: str, *, param: str | None = None, status: int = 400, code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.code, self.headers = message, param, status, code, headers


@dataclass(frozen=True)
class ChatRequest:
    """The question (the last user message) and the user and assistant turns before it."""

    question: str
    history: list[Turn] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    model: str = MODEL_ID  # "crag", or "crag:NAME" for the collection NAME


def json_object(body: bytes) -> dict[str, Any]:
    """The JSON object in a request's `body`, or `BadRequest`."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        raise BadRequest("The request body is not valid JSON; send a JSON object.") from None
    if not isinstance(payload, dict):
        raise BadRequest("The request body must be a JSON object.")
    return payload


def parse(body: bytes) -> ChatRequest:
    """The request in `body`, or `BadRequest`."""
    payload = json_object(body)
    model = payload.get("model")
    if not isinstance(model, str):
        raise BadRequest("'model' is required, a string: use \"crag\", or \"crag:NAME\" for the "
                         "collection NAME (GET /v1/models lists them).", param="model")
    refuse_unsupported(payload)
    stream = _flag(payload, "stream")
    options = payload.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object.", param="stream_options")
    include_usage = _flag(options or {}, "include_usage", "stream_options.include_usage")
    turns = _turns(payload.get("messages"))
    asked = max((n for n, t in enumerate(turns) if t.role == "user"), default=None)
    if asked is None:
        raise BadRequest("'messages' holds no user message: the last one is the question.", param="messages")
    return ChatRequest(turns[asked].content, turns[:asked], stream, include_usage, model)


# Each parameter that asks for a reply crag cannot give, the values of it that ask for nothing
# more than crag's plain answer, and why the others cannot be had.
_UNSUPPORTED: dict[str, tuple[tuple[object, ...], str]] = {
    "tools": ((None, []), "crag answers from its documents and calls no tools"),
    "functions": ((None, []), "crag answers from its documents and calls no functions"),
    "tool_choice": ((None, "none", "auto"), "crag calls no tools"),
    "function_call": ((None, "none", "auto"), "crag calls no functions"),
    "response_format": ((None, {"type": "text"}),
                        "crag's answer is cited prose, not JSON: only {\"type\": \"text\"} is accepted; "
                        "for structured output, have a model structure crag's answer"),
    "n": ((None, 1), "crag gives one answer per question, written from the passages found, not sampled"),
    "logprobs": ((None, False), "crag's answer has no token log probabilities"),
    "top_logprobs": ((None, 0), "crag's answer has no token log probabilities"),
    "modalities": ((None, ["text"]), "crag answers in text only"),
    "audio": ((None,), "crag answers in text only"),
}


def refuse_unsupported(payload: dict, table: dict[str, tuple[tuple[object, ...], str]] = _UNSUPPORTED) -> None:
    """`BadRequest` naming the first parameter in `payload` that asks for what crag cannot give."""
    for name, (plain, why) in table.items():
        value = payload.get(name)
        if not any(value == p and type(value) is type(p) for p in plain):  # 1 but not True or 1.0
            shown = json.dumps(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise BadRequest(f"'{name}': {shown} is not supported: {why}.", param=name,
                             code="unsupported_parameter" if name in ("tools", "functions") else "unsupported_value")


def _flag(payload: dict, name: str, param: str | None = None) -> bool:
    value = payload.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"'{param or name}' must be true or false.", param=param or name)
    return value


def _turns(messages: object) -> list[Turn]:
    """The user and assistant messages as turns (system, developer and tool ones are checked,
    then left out: the answer comes from the documents, not from instructions)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' is required: a non-empty list of {role, content} objects.", param="messages")
    turns: list[Turn] = []
    for n, message in enumerate(messages):
        where = f"messages[{n}]"
        if not isinstance(message, dict):
            raise BadRequest(f"{where} must be an object with 'role' and 'content'.", param=where)
        role = message.get("role")
        if role not in ROLES:
            raise BadRequest(f"{where}.role must be one of {sorted(ROLES)}.", param=f"{where}.role")
        text = _text(message.get("content"), f"{where}.content", required=role == "user")
        if role in ("user", "assistant") and text is not None:
            turns.append(Turn(role=role, content=text))
    return turns


def _text(content: object, param: str, *, required: bool) -> str | None:
    """A message's text: a string, or the text parts of a list of content parts."""
    if content is None and not required:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        texts = [p.get("text") for p in content if p.get("type") == "text"]
        if texts and all(isinstance(t, str) for t in texts) and len(texts) == len(content):
            return "\n".join(texts)  # type: ignore[arg-type]
        raise BadRequest(f"{param}: only text parts ({{\"type\": \"text\", \"text\": ...}}) are understood.",
                         param=param)
    raise BadRequest(f"{param} must be a string or a list of text parts.", param=param)
