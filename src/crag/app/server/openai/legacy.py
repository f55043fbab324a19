"""The legacy `POST /v1/completions`, answered as a one-message chat by the chat door itself.

    {"model": "crag", "prompt": "What warranty does Lumen give on the Helio H10?"}
    -> {"object": "text_completion", "choices": [{"text": "The Helio H10 ... [1]\\n\\nSources: ...", ...}]}

Older clients (LangChain's `OpenAI` LLM, evaluation harnesses) still speak it. Rather than a
second way to start and read a run, the prompt becomes the chat request's one user message and
the chat reply is reshaped: the answer as `choices[0].text`, `text_completion` for
`chat.completion` (and for each streamed chunk), the `crag` field as it is. So the chat door's
checks, its errors and whatever runs its questions serve this door unchanged.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Message

from crag.app.server.openai.errors import openai_error
from crag.app.server.openai.request import BadRequest, json_object, refuse_unsupported

Handler = Callable[[Request], Awaitable[Response]]

# The legacy parameters that ask for more than the one plain answer, as openai_request's table.
_UNSUPPORTED: dict[str, tuple[tuple[object, ...], str]] = {
    "n": ((None, 1), "crag gives one answer per prompt, written from the passages found, not sampled"),
    "best_of": ((None, 1), "crag gives one answer per prompt, written from the passages found, not sampled"),
    "echo": ((None, False), "the answer does not repeat the prompt"),
    "suffix": ((None, ""), "crag answers the prompt as a question; it does not fill in text before a suffix"),
    "logprobs": ((None, 0), "crag's answer has no token log probabilities"),
}
_PASSED_ON = ("model", "stream", "stream_options")  # read by the chat door, which checks them


def chat_body(body: bytes) -> bytes:
    """The chat request that asks a legacy request's prompt, or `BadRequest` naming its field."""
    payload = json_object(body)
    prompt = payload.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]  # one prompt in a list: the usual way some clients send one
    if not isinstance(prompt, str):
        raise BadRequest("'prompt' is required: the question, as one string (not token ids, not several "
                         "prompts: crag answers one question per request).", param="prompt")
    refuse_unsupported(payload, _UNSUPPORTED)
    chat = {name: payload[name] for name in _PASSED_ON if name in payload}
    return json.dumps({**chat, "messages": [{"role": "user", "content": prompt}]}).encode()


def legacy_door(chat: Handler) -> Handler:
    """The `/v1/completions` handler over `chat`, the `/v1/chat/completions` one."""

    async def completions(request: Request) -> Response:
        try:
            body = chat_body(await request.body())
        except BadRequest as exc:
            return openai_error(exc.status, exc.message, param=exc.param, code=exc.code)
        return as_legacy(await chat(Request(request.scope, _replaying(body, request.receive))))

    return completions


def as_legacy(response: Response) -> Response:
    """A chat door's response as the legacy door's: its reply reshaped, or its error with the
    field at fault named as this door names it (`prompt` for `messages`)."""
    if isinstance(response, StreamingResponse):
        response.body_iterator = _events(response.body_iterator)
        return response
    body = json.loads(response.body)
    if response.status_code < 400:
        return JSONResponse(_completion(body))
    error = body.get("error") or {}
    if str(error.get("param") or "").startswith("messages"):
        error["param"] = "prompt"
    kept = {k: v for k, v in response.headers.items() if k not in ("content-length", "content-type")}
    return JSONResponse(body, status_code=response.status_code, headers=kept)


def _completion(reply: dict[str, Any]) -> dict[str, Any]:
    """A `chat.completion` or `chat.completion.chunk` as a `text_completion`."""
    choices = [{"text": (c.get("message") or c.get("delta") or {}).get("content") or "", "index": c["index"],
                "logprobs": None, "finish_reason": c.get("finish_reason")} for c in reply.get("choices", [])]
    rest = {k: v for k, v in reply.items() if k not in ("id", "object", "choices")}
    return {"id": "cmpl-" + reply["id"].removeprefix("chatcmpl-"), "object": "text_completion",
            "choices": choices, **rest}


async def _events(events: AsyncIterator[str | bytes]) -> AsyncIterator[str]:
    """The chat door's server-sent events as the legacy door's; `[DONE]` and an error as they are."""
    pending = ""
    async for part in events:
        pending += part if isinstance(part, str) else part.decode()
        *whole, pending = pending.split("\n\n")
        for event in whole:
            data = event.removeprefix("data: ")
            if data == "[DONE]" or not data.startswith("{"):
                yield event + "\n\n"
                continue
            chunk = json.loads(data)
            if "choices" in chunk:
                if chunk["choices"] and chunk["choices"][0].get("delta") == {"role": "assistant", "content": ""}:
                    continue  # the chat stream's opening role: a legacy stream has none
                chunk = _completion(chunk)
            yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
    if pending:
        yield pending


def _replaying(body: bytes, receive: Callable[[], Awaitable[Message]]) -> Callable[[], Awaitable[Message]]:
    """A `receive` that gives `body` once, then waits on the real one (for the disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
