"""Shared pieces for the fake-server tests: real SDK clients, and one outcome per protocol.

``collect`` sends one streamed request through the real SDK of a protocol and reduces the raw
events to an :class:`Outcome`, so a single scenario can be checked against all three APIs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest

from drover.testing import FakeLLMServer

PROTOCOLS = ("anthropic", "openai-chat", "openai-responses")
#: Typed loosely so it fits both SDKs' message parameter types.
USER: Any = [{"role": "user", "content": "hi"}]


@dataclass
class Outcome:
    text: str = ""
    thinking: str = ""
    #: (id, name, argument text) per tool call, in order.
    calls: list[tuple[str | None, str, str]] = field(default_factory=list)
    #: Argument fragments per call, as streamed.
    fragments: list[list[str]] = field(default_factory=list)
    text_deltas: list[str] = field(default_factory=list)
    stop: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    events: list[Any] = field(default_factory=list)


Collect = Callable[..., Awaitable["Outcome"]]


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def anthropic_client(fake_llm: FakeLLMServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = anthropic.AsyncAnthropic(
        base_url=fake_llm.anthropic_base_url, api_key="test", max_retries=0
    )
    yield client
    await client.close()


@pytest.fixture
async def openai_client(fake_llm: FakeLLMServer) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=fake_llm.openai_base_url, api_key="test", max_retries=0)
    yield client
    await client.close()


@pytest.fixture
async def collect(protocol: str, fake_llm: FakeLLMServer) -> AsyncIterator[Collect]:
    """Send one streamed request with the protocol's SDK (only that client is built)."""
    if protocol == "anthropic":
        a_client = anthropic.AsyncAnthropic(
            base_url=fake_llm.anthropic_base_url, api_key="test", max_retries=0
        )

        async def run_anthropic(**extra: Any) -> Outcome:
            return await collect_anthropic(a_client, **extra)

        yield run_anthropic
        await a_client.close()
        return
    o_client = openai.AsyncOpenAI(base_url=fake_llm.openai_base_url, api_key="test", max_retries=0)

    async def run_openai(**extra: Any) -> Outcome:
        if protocol == "openai-chat":
            return await collect_chat(o_client, **extra)
        return await collect_responses(o_client, **extra)

    yield run_openai
    await o_client.close()


async def collect_anthropic(client: anthropic.AsyncAnthropic, **extra: Any) -> Outcome:
    out = Outcome()
    args: dict[str, Any] = {"model": "claude-test", "max_tokens": 100, "messages": USER}
    stream = await client.messages.create(**{**args, **extra}, stream=True)
    by_index: dict[int, int] = {}
    async for event in stream:
        out.events.append(event)
        if event.type == "message_start":
            out.input_tokens = event.message.usage.input_tokens
        elif event.type == "content_block_start" and event.content_block.type == "tool_use":
            by_index[event.index] = len(out.calls)
            out.calls.append((event.content_block.id, event.content_block.name, ""))
            out.fragments.append([])
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                out.text += delta.text
                out.text_deltas.append(delta.text)
            elif delta.type == "thinking_delta":
                out.thinking += delta.thinking
            elif delta.type == "input_json_delta":
                n = by_index[event.index]
                call_id, name, text = out.calls[n]
                out.calls[n] = (call_id, name, text + delta.partial_json)
                out.fragments[n].append(delta.partial_json)
        elif event.type == "message_delta":
            out.stop = event.delta.stop_reason
            out.output_tokens = event.usage.output_tokens
    return out


async def collect_chat(client: openai.AsyncOpenAI, **extra: Any) -> Outcome:
    out = Outcome()
    args: dict[str, Any] = {
        "model": "gpt-test",
        "messages": USER,
        "stream_options": {"include_usage": True},
    }
    stream = await client.chat.completions.create(**{**args, **extra}, stream=True)
    async for chunk in stream:
        out.events.append(chunk)
        if chunk.usage is not None:
            out.input_tokens = chunk.usage.prompt_tokens
            out.output_tokens = chunk.usage.completion_tokens
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                out.text += delta.content
                out.text_deltas.append(delta.content)
            reasoning = (delta.model_extra or {}).get("reasoning_content")
            if reasoning:
                out.thinking += reasoning
            for call in delta.tool_calls or []:
                while len(out.calls) <= call.index:
                    out.calls.append((None, "", ""))
                    out.fragments.append([])
                call_id, name, text = out.calls[call.index]
                function = call.function
                piece = (function.arguments or "") if function else ""
                out.calls[call.index] = (
                    call.id or call_id,
                    (function.name if function and function.name else name),
                    text + piece,
                )
                out.fragments[call.index].append(piece)
            if choice.finish_reason is not None:
                out.stop = choice.finish_reason
    return out


async def collect_responses(client: openai.AsyncOpenAI, **extra: Any) -> Outcome:
    out = Outcome()
    args: dict[str, Any] = {"model": "gpt-test", "input": "hi"}
    stream = await client.responses.create(**{**args, **extra}, stream=True)
    by_item: dict[str, int] = {}
    async for event in stream:
        out.events.append(event)
        if event.type == "response.output_text.delta":
            out.text += event.delta
            out.text_deltas.append(event.delta)
        elif event.type == "response.reasoning_summary_text.delta":
            out.thinking += event.delta
        elif event.type == "response.output_item.added" and event.item.type == "function_call":
            by_item[event.item.id or ""] = len(out.calls)
            out.calls.append((event.item.call_id, event.item.name, ""))
            out.fragments.append([])
        elif event.type == "response.function_call_arguments.delta":
            n = by_item[event.item_id]
            call_id, name, text = out.calls[n]
            out.calls[n] = (call_id, name, text + event.delta)
            out.fragments[n].append(event.delta)
        elif event.type in ("response.completed", "response.incomplete"):
            response = event.response
            reason = response.incomplete_details.reason if response.incomplete_details else None
            out.stop = response.status if reason is None else f"{response.status}:{reason}"
            assert response.usage is not None
            out.input_tokens = response.usage.input_tokens
            out.output_tokens = response.usage.output_tokens
    return out
