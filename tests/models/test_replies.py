"""What a chat reply becomes: text-only replies read straight from their JSON, anything else
through the openai SDK's models and llama-index's conversion, with the same result shape."""

from __future__ import annotations

from typing import Any

from llama_index.core.llms import ChatMessage
from support.loopback import LoopbackServer, Reply, chat_completion

from crag.models import LLMOptions, openai_llm


def _serve(completion: dict[str, Any]) -> LoopbackServer:
    return LoopbackServer(lambda request: Reply(200, completion))


async def _ask(server: LoopbackServer) -> Any:
    llm = openai_llm(LLMOptions(base_url=server.url + "/v1", api_key="sk-test", max_retries=0))
    return await llm.achat([ChatMessage(role="user", content="Question: why?")])


async def test_a_text_reply_becomes_the_message_and_its_token_counts() -> None:
    with _serve(chat_completion("Because [1].", model="m", prompt_text="Question: why?")) as server:
        reply = await _ask(server)

    assert reply.message.role == "assistant" and reply.message.content == "Because [1]."
    assert reply.additional_kwargs["prompt_tokens"] > 0
    assert reply.raw["choices"][0]["message"]["content"] == "Because [1]."


async def test_a_reply_with_tool_calls_goes_through_the_sdk_models() -> None:
    completion = chat_completion("", model="m")
    completion["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        ],
    }
    with _serve(completion) as server:
        reply = await _ask(server)

    (call,) = reply.message.additional_kwargs["tool_calls"]
    assert call.function.name == "lookup"


def test_empty_extra_fields_still_make_a_text_reply() -> None:
    from crag._compat.openai import plain_text

    vllm = {"role": "assistant", "content": "Yes.", "tool_calls": [], "reasoning_content": None}
    assert plain_text({"logprobs": None}, vllm)
    assert not plain_text({"logprobs": None}, {**vllm, "reasoning_content": "hmm"})
    assert not plain_text({"logprobs": {"content": []}}, {"role": "assistant", "content": "x"})
