"""Chat Completions quirks of compatible servers (Ollama, vLLM, llama.cpp, LM Studio…)."""

from __future__ import annotations

from typing import Any

import openai

from drover.testing import FakeLLMServer

from .conftest import collect_chat

CALLS = [{"name": "read_file", "input": {"path": "a.txt"}}, {"name": "glob", "input": {"p": "*"}}]


async def run(fake_llm: FakeLLMServer, client: openai.AsyncOpenAI, **script: Any) -> Any:
    fake_llm.script(script)
    return await collect_chat(client)


async def test_args_whole(fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI) -> None:
    out = await run(fake_llm, openai_client, tool_calls=CALLS, quirks=["args_whole"])
    assert out.fragments == [['{"path":"a.txt"}'], ['{"p":"*"}']]


async def test_no_ids(fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI) -> None:
    out = await run(fake_llm, openai_client, tool_calls=CALLS, quirks=["no_ids"])
    assert [call_id for call_id, _name, _args in out.calls] == [None, None]


async def test_repeated_ids(fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI) -> None:
    out = await run(fake_llm, openai_client, tool_calls=CALLS, quirks=["repeated_ids"])
    ids = [call_id for call_id, _name, _args in out.calls]
    assert ids[0] is not None
    assert ids == [ids[0], ids[0]]


async def test_no_usage(fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI) -> None:
    out = await run(fake_llm, openai_client, text="hi", quirks=["no_usage"])
    assert out.output_tokens is None
    assert out.events, "no chunks at all"
    assert all(chunk.choices for chunk in out.events)


async def test_reasoning_content(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    out = await run(
        fake_llm, openai_client, thinking="mull it over", text="ok", quirks=["reasoning_content"]
    )
    assert (out.thinking, out.text) == ("mull it over", "ok")


async def test_stop_on_tool_call(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    out = await run(fake_llm, openai_client, tool_calls=CALLS, quirks=["stop_on_tool_call"])
    assert out.stop == "stop"
    assert len(out.calls) == 2


async def test_no_role_chunk(fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI) -> None:
    out = await run(fake_llm, openai_client, text="hello", quirks=["no_role_chunk"])
    assert out.events[0].choices[0].delta.role is None
    assert out.events[0].choices[0].delta.content == "hello"


async def test_without_quirks_a_tool_first_reply_opens_with_role_and_first_call(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    out = await run(fake_llm, openai_client, tool_calls=CALLS)
    first = out.events[0].choices[0].delta
    assert first.role == "assistant"
    assert first.content is None
    assert first.tool_calls[0].id
    assert first.tool_calls[0].function.name == "read_file"
    assert first.tool_calls[0].function.arguments == ""
    assert out.stop == "tool_calls"
    assert out.output_tokens is not None
