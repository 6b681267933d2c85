"""Chat Completions specifics: compatible servers' quirks, finish reasons, the chunk mapper."""

from __future__ import annotations

from typing import Any

import pytest
from openai._models import construct_type
from openai.types.chat import ChatCompletionChunk

from drover.core.messages import (
    ThinkingBlock,
    ToolResultBlock,
    tool_result_message,
    user_message,
)
from drover.core.model_stream import BlockDelta, BlockStart, BlockStop, StreamEnd
from drover.errors import StreamError
from drover.providers.openai_chat import ChatEvents, OpenAIChatProvider
from drover.testing.server import FakeLLMServer

from .conftest import Outcome, collect, drain, make_provider, request

TWO_CALLS = [
    {"name": "read_file", "input": {"path": "a.txt"}},
    {"name": "read_file", "input": {"path": "b.txt"}},
]


async def run(fake_llm: FakeLLMServer, *responses: dict[str, Any]) -> Outcome:
    """The first response, then a follow-up request answering its calls (validated)."""
    provider = make_provider("openai", fake_llm)
    fake_llm.script(*responses, {"text": "thanks"})
    try:
        first = await collect(provider, request(user_message("go")))
        if first.message.tool_uses:
            results = tool_result_message(
                [
                    ToolResultBlock(tool_use_id=u.id, content=f"r{i}")
                    for i, u in enumerate(first.message.tool_uses)
                ]
            )
            await collect(provider, request(user_message("go"), first.message, results))
    finally:
        await provider.aclose()
    return first


def tool_messages(fake_llm: FakeLLMServer) -> list[dict[str, Any]]:
    return [m for m in fake_llm.requests[1].body["messages"] if m["role"] == "tool"]


async def test_arguments_sent_whole(fake_llm: FakeLLMServer) -> None:
    outcome = await run(fake_llm, {"tool_calls": TWO_CALLS, "quirks": ["args_whole"]})
    fragments = [e for e in outcome.events if isinstance(e, BlockDelta) and e.kind == "input_json"]
    assert len(fragments) == 2
    assert [u.input for u in outcome.message.tool_uses] == [{"path": "a.txt"}, {"path": "b.txt"}]


async def test_missing_ids_are_synthesised_deterministically(fake_llm: FakeLLMServer) -> None:
    outcome = await run(fake_llm, {"tool_calls": TWO_CALLS, "quirks": ["no_ids"]})
    ids = [u.id for u in outcome.message.tool_uses]
    assert len(set(ids)) == 2 and all(i.startswith("call_") and len(i) <= 40 for i in ids)
    assert [m["tool_call_id"] for m in tool_messages(fake_llm)] == ids
    # Deterministic: the same chunks give the same ids in any mapper, in any process.
    nameless = chunk(tool_calls=[{"index": 0, "function": {"name": "x"}}])
    first, second = ChatEvents().feed(nameless), ChatEvents().feed(nameless)
    assert first == second and isinstance(first[0], BlockStart) and first[0].id


async def test_repeated_ids_are_made_unique(fake_llm: FakeLLMServer) -> None:
    outcome = await run(fake_llm, {"tool_calls": TWO_CALLS, "quirks": ["repeated_ids"]})
    first, second = (u.id for u in outcome.message.tool_uses)
    assert first != second and second == f"{first}_2"
    assert [m["tool_call_id"] for m in tool_messages(fake_llm)] == [first, second]


async def test_no_usage_chunk_gives_zero_usage_marked_partial(fake_llm: FakeLLMServer) -> None:
    outcome = await run(fake_llm, {"text": "hi", "quirks": ["no_usage"]})
    assert outcome.acc.usage.input_tokens == 0 and outcome.acc.usage.partial


async def test_reasoning_content_becomes_thinking_and_is_not_sent_back(
    fake_llm: FakeLLMServer,
) -> None:
    outcome = await run(
        fake_llm,
        {"thinking": "hmm", "tool_calls": TWO_CALLS[:1], "quirks": ["reasoning_content"]},
    )
    thinking = outcome.message.content[0]
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == "hmm"
    assistant = fake_llm.requests[1].body["messages"][2]
    assert assistant["role"] == "assistant" and "hmm" not in str(assistant)


async def test_stop_with_tool_calls_means_tool_use(fake_llm: FakeLLMServer) -> None:
    outcome = await run(fake_llm, {"tool_calls": TWO_CALLS, "quirks": ["stop_on_tool_call"]})
    end = outcome.events[-1]
    assert isinstance(end, StreamEnd) and end.stop_reason == "tool_use"


async def test_all_quirks_at_once(fake_llm: FakeLLMServer) -> None:
    quirks = [
        "args_whole",
        "no_ids",
        "no_usage",
        "reasoning_content",
        "stop_on_tool_call",
        "no_role_chunk",
    ]
    outcome = await run(
        fake_llm, {"thinking": "t", "text": "x", "tool_calls": TWO_CALLS, "quirks": quirks}
    )
    assert len(outcome.message.tool_uses) == 2
    assert outcome.acc.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("reason", "expected"), [("max_tokens", "max_tokens"), ("refusal", "refusal")]
)
async def test_finish_reasons(fake_llm: FakeLLMServer, reason: str, expected: str) -> None:
    outcome = await run(fake_llm, {"text": "partial answer", "stop_reason": reason})
    assert outcome.acc.stop_reason == expected


async def test_a_fatal_error_chunk_is_not_retryable(fake_llm: FakeLLMServer) -> None:
    provider = make_provider("openai", fake_llm)
    error = {"type": "invalid_request_error", "message": "context too long"}
    fake_llm.script({"text": "abcdefghijklmnopqrstuvwxyz", "error_after": 3, "error": error})
    outcome = await drain(provider, request())
    await provider.aclose()
    assert isinstance(outcome.error, StreamError) and not outcome.error.retryable
    assert "context too long" in str(outcome.error)


async def test_request_shape(fake_llm: FakeLLMServer) -> None:
    provider = OpenAIChatProvider("llama3.1:8b", api_key="k", base_url=fake_llm.openai_base_url)
    fake_llm.script({"text": "ok"})
    await collect(provider, request(system="Be terse."))
    await provider.aclose()
    body = fake_llm.requests[0].body
    assert body["model"] == "llama3.1:8b" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"][0] == {"role": "system", "content": "Be terse."}
    assert body["tools"][0]["type"] == "function"
    assert body["tools"][0]["function"]["name"] == "read_file"
    assert body["max_tokens"] == 8192 and "max_completion_tokens" not in body


# --- the chunk mapper ----------------------------------------------------------------------


def chunk(
    *,
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish: str | None = None,
    **extra: Any,
) -> ChatCompletionChunk:
    delta: dict[str, Any] = {**extra}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    parsed: ChatCompletionChunk = construct_type(  # as the SDK parses a stream: leniently
        type_=ChatCompletionChunk,
        value={
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        },
    )
    return parsed


def test_calls_without_an_index_are_told_apart_by_their_ids() -> None:
    mapper = ChatEvents()
    out = []
    out += mapper.feed(
        chunk(tool_calls=[{"id": "a", "function": {"name": "x", "arguments": '{"p"'}}])
    )
    out += mapper.feed(chunk(tool_calls=[{"function": {"arguments": ": 1}"}}]))
    out += mapper.feed(
        chunk(tool_calls=[{"id": "b", "function": {"name": "y", "arguments": "{}"}}])
    )
    out += mapper.feed(chunk(finish="tool_calls"))
    starts = [e for e in out if isinstance(e, BlockStart)]
    assert [(s.id, s.name) for s in starts] == [("a", "x"), ("b", "y")]
    data = {s.index: "" for s in starts}
    for e in out:
        if isinstance(e, BlockDelta):
            data[e.index] += e.data
    assert list(data.values()) == ['{"p": 1}', "{}"]


def test_arguments_before_the_name_wait_for_it() -> None:
    mapper = ChatEvents()
    assert (
        mapper.feed(chunk(tool_calls=[{"index": 0, "id": "c", "function": {"arguments": '{"a":'}}]))
        == []
    )
    out = mapper.feed(
        chunk(tool_calls=[{"index": 0, "function": {"name": "x", "arguments": "1}"}}])
    )
    assert out == [
        BlockStart(index=0, kind="tool_use", id="c", name="x"),
        BlockDelta(index=0, kind="input_json", data='{"a":'),
        BlockDelta(index=0, kind="input_json", data="1}"),
    ]


def test_text_before_a_call_is_closed_and_later_text_gets_its_own_block() -> None:
    mapper = ChatEvents()
    out = mapper.feed(chunk(content="Let me check."))
    out += mapper.feed(chunk(tool_calls=[{"index": 0, "id": "c", "function": {"name": "x"}}]))
    out += mapper.feed(chunk(content="More."))
    out += mapper.feed(chunk(finish="tool_calls"))
    out += mapper.finish()
    kinds = [(type(e).__name__, e.index) for e in out if not isinstance(e, StreamEnd)]
    assert kinds == [
        ("BlockStart", 0),
        ("BlockDelta", 0),
        ("BlockStop", 0),
        ("BlockStart", 1),
        ("BlockStart", 2),
        ("BlockDelta", 2),
        ("BlockStop", 2),
        ("BlockStop", 1),
    ]


def test_reasoning_field_names_of_compatible_servers() -> None:
    for name in ("reasoning_content", "reasoning"):
        mapper = ChatEvents()
        out = mapper.feed(chunk(**{name: "thinking..."}))
        assert out == [
            BlockStart(index=0, kind="thinking"),
            BlockDelta(index=0, kind="thinking", data="thinking..."),
        ]


def test_fragments_after_the_finish_reason_are_ignored() -> None:
    mapper = ChatEvents()
    mapper.feed(chunk(tool_calls=[{"index": 0, "id": "c", "function": {"name": "x"}}]))
    mapper.feed(chunk(finish="tool_calls"))
    assert mapper.feed(chunk(tool_calls=[{"index": 0, "function": {"arguments": "junk"}}])) == []
    end = mapper.finish()[-1]
    assert isinstance(end, StreamEnd) and end.stop_reason == "tool_use"
    assert not [e for e in mapper.finish() if isinstance(e, BlockStop)]


def test_a_stream_without_a_finish_reason_still_ends() -> None:
    mapper = ChatEvents()
    mapper.feed(chunk(content="hello"))
    out = mapper.finish()
    assert out[0] == BlockStop(index=0)
    end = out[-1]
    assert isinstance(end, StreamEnd) and end.stop_reason == "end_turn" and end.usage.partial
