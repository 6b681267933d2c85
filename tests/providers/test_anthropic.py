"""Anthropic specifics: thinking round trip, request shape, and the raw event mapper."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic._models import construct_type  # how the SDK itself builds stream events
from anthropic.types import RawMessageStreamEvent

from drover.core.messages import (
    ThinkingBlock,
    ToolResultBlock,
    tool_result_message,
    user_message,
)
from drover.core.model_stream import BlockDelta, BlockStart, BlockStop, StreamEnd, UsageUpdate
from drover.errors import StreamError
from drover.providers.anthropic import AnthropicEvents, AnthropicProvider
from drover.testing.server import FakeLLMServer

from .conftest import collect, drain, make_provider, request


def sdk_event(data: dict[str, Any]) -> RawMessageStreamEvent:
    event: RawMessageStreamEvent = construct_type(type_=RawMessageStreamEvent, value=data)
    return event


def feed(mapper: AnthropicEvents, *events: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for data in events:
        out += mapper.feed(sdk_event(data))
    return out


START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 4},
    },
}


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def block_delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str | None, output_tokens: int = 7) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }


# --- through the fake server ---------------------------------------------------------------


async def test_signed_thinking_goes_back_unchanged(fake_llm: FakeLLMServer) -> None:
    provider = make_provider("anthropic", fake_llm)
    fake_llm.script(
        {
            "thinking": "I should read it.",
            "tool_calls": [{"name": "read_file", "input": {"path": "a"}}],
        },
        {"text": "It says AAA."},
    )
    first = await collect(provider, request(user_message("read a")))
    thinking = first.message.content[0]
    assert isinstance(thinking, ThinkingBlock) and thinking.signature
    call = first.message.tool_uses[0]
    results = tool_result_message([ToolResultBlock(tool_use_id=call.id, content="AAA")])
    second = await collect(provider, request(user_message("read a"), first.message, results))
    await provider.aclose()
    assert second.message.text == "It says AAA."
    sent = fake_llm.requests[1].body["messages"][1]["content"]
    assert sent[0] == {
        "type": "thinking",
        "thinking": "I should read it.",
        "signature": thinking.signature,
    }
    assert sent[1]["type"] == "tool_use" and sent[1]["id"] == call.id


async def test_request_shape(fake_llm: FakeLLMServer) -> None:
    provider = AnthropicProvider(
        "claude-x", api_key="k", base_url=fake_llm.anthropic_base_url, max_tokens=1000
    )
    fake_llm.script({"text": "ok"}, {"text": "ok"})
    await collect(provider, request(system="You are terse."))
    budgeted = AnthropicProvider(
        "claude-x", api_key="k", base_url=fake_llm.anthropic_base_url, thinking_budget=2048
    )
    await collect(budgeted, request(system=""))
    await provider.aclose()
    await budgeted.aclose()
    plain, thinking = (r.body for r in fake_llm.requests)
    assert plain["model"] == "claude-x" and plain["stream"] is True
    assert plain["system"] == "You are terse."
    assert plain["max_tokens"] == 1000  # the provider's cap wins over the request's 8192
    assert plain["tools"][0]["input_schema"]["required"] == ["path"]
    assert "thinking" not in plain
    assert thinking["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert thinking["max_tokens"] == 8192 + 2048 and "system" not in thinking
    headers = fake_llm.requests[0].headers
    assert headers.get("x-api-key") == "k" or headers.get("authorization") == "Bearer k"


async def test_an_error_event_that_says_the_request_is_wrong_is_not_retryable(
    fake_llm: FakeLLMServer,
) -> None:
    provider = make_provider("anthropic", fake_llm)
    error = {"type": "invalid_request_error", "message": "prompt is too long"}
    fake_llm.script({"text": "abcdefghijklmnopqrstuvwxyz", "error_after": 5, "error": error})
    outcome = await drain(provider, request())
    await provider.aclose()
    assert isinstance(outcome.error, StreamError)
    assert outcome.error.error_type == "invalid_request_error" and not outcome.error.retryable
    assert "prompt is too long" in str(outcome.error)


async def test_retry_after_header_sets_the_delay(fake_llm: FakeLLMServer) -> None:
    provider = make_provider("anthropic", fake_llm)
    fake_llm.script({"http_error": {"status": 429, "retry_after": 0.01}}, {"text": "ok"})
    outcome = await collect(provider, request())
    await provider.aclose()
    assert [r.delay for r in outcome.retries] == [0.01]


# --- the event mapper ----------------------------------------------------------------------


def test_message_start_reports_usage_with_cached_tokens_included() -> None:
    (update,) = feed(AnthropicEvents(), START)
    assert isinstance(update, UsageUpdate)
    assert update.usage.input_tokens == 14 and update.usage.cache_read_tokens == 4


def test_redacted_thinking_is_delivered_whole_at_its_stop() -> None:
    mapper = AnthropicEvents()
    out = feed(
        mapper,
        START,
        block_start(0, {"type": "redacted_thinking", "data": "OPAQUE"}),
        block_stop(0),
    )
    assert out[1:] == [
        BlockStart(index=0, kind="thinking"),
        BlockStop(index=0, meta={"redacted_data": "OPAQUE"}),
    ]


def test_tool_input_sent_whole_in_the_start_event_is_passed_on() -> None:
    mapper = AnthropicEvents()
    out = feed(
        mapper,
        block_start(0, {"type": "tool_use", "id": "t1", "name": "x", "input": {"a": 1}}),
        block_stop(0),
    )
    assert out == [
        BlockStart(index=0, kind="tool_use", id="t1", name="x"),
        BlockDelta(index=0, kind="input_json", data='{"a": 1}'),
        BlockStop(index=0),
    ]


def test_unknown_blocks_deltas_and_events_are_skipped() -> None:
    mapper = AnthropicEvents()
    out = feed(
        mapper,
        block_start(0, {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}),
        block_delta(0, {"type": "input_json_delta", "partial_json": '{"q": 1}'}),
        block_stop(0),
        block_start(1, {"type": "text", "text": "", "citations": None, "new_field": 1}),
        block_delta(1, {"type": "citations_delta", "citation": {}}),
        block_delta(1, {"type": "future_delta", "stuff": "x"}),
        block_delta(1, {"type": "text_delta", "text": "hi"}),
        {"type": "future_event", "whatever": True},
        block_stop(1),
    )
    assert out == [
        BlockStart(index=1, kind="text"),
        BlockDelta(index=1, kind="text", data="hi"),
        BlockStop(index=1),
    ]


def test_stop_reasons_map_onto_the_neutral_ones() -> None:
    for raw, expected in [
        ("end_turn", "end_turn"),
        ("tool_use", "tool_use"),
        ("max_tokens", "max_tokens"),
        ("model_context_window_exceeded", "max_tokens"),
        ("pause_turn", "pause_turn"),
        ("refusal", "refusal"),
        ("something_new", "other"),
    ]:
        mapper = AnthropicEvents()
        out = feed(mapper, START, message_delta(raw), {"type": "message_stop"})
        end = out[-1]
        assert isinstance(end, StreamEnd) and end.stop_reason == expected
        assert end.usage.output_tokens == 7 and end.usage.input_tokens == 14
        assert end.meta == {"provider": "anthropic", "message_id": "msg_1", "model": "claude-x"}


def test_a_stream_without_message_stop_ends_if_its_stop_reason_came() -> None:
    mapper = AnthropicEvents()
    feed(mapper, START, message_delta("end_turn"))
    (end,) = mapper.finish()
    assert isinstance(end, StreamEnd) and end.stop_reason == "end_turn"


def test_a_stream_cut_before_its_stop_reason_is_an_error() -> None:
    mapper = AnthropicEvents()
    feed(mapper, START, block_start(0, {"type": "text", "text": ""}))
    with pytest.raises(StreamError) as caught:
        mapper.finish()
    assert caught.value.retryable
