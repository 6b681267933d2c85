"""Every provider through its real SDK against the fake server: the behaviour they share.

Each test runs once per protocol (``anthropic``, ``openai``, ``openai-responses``) and per
HTTP client the SDKs can send through (``httpx``, ``aiohttp``); the ``fake_llm`` fixture fails
the test if a request broke a rule the real API enforces.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from drover.core.messages import TextBlock, ThinkingBlock, ToolUseBlock
from drover.core.model_stream import BlockDelta, BlockStart, RetryNotice, StreamEnd
from drover.errors import ProviderConnectionError, ProviderHTTPError, StreamError
from drover.providers.base import Provider
from drover.testing.server import FakeLLMServer

from .conftest import ON_BOTH_CLIENTS, collect, drain, make_provider, request

LONG = "The quick brown fox jumps over the lazy dog. " * 3


pytestmark = ON_BOTH_CLIENTS


async def test_text_streams_in_deltas(provider: Provider, fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"text": LONG})
    outcome = await collect(provider, request())
    deltas = [e for e in outcome.events if isinstance(e, BlockDelta) and e.kind == "text"]
    assert len(deltas) > 3
    assert "".join(d.data for d in deltas) == LONG
    assert outcome.message.content == (TextBlock(text=LONG, meta=outcome.message.content[0].meta),)
    end = outcome.events[-1]
    assert isinstance(end, StreamEnd) and end.stop_reason == "end_turn"
    assert end.meta["provider"] == provider.name
    assert len(outcome.of_type("end")) == 1


async def test_usage_is_reported(provider: Provider, fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"text": "hi", "usage": {"input_tokens": 5, "output_tokens": 2}})
    outcome = await collect(provider, request())
    assert (outcome.acc.usage.input_tokens, outcome.acc.usage.output_tokens) == (5, 2)
    assert not outcome.acc.usage.partial


async def test_cached_tokens_count_as_input_and_as_cache_reads(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    usage = {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 100}
    fake_llm.script({"text": "hi", "usage": usage})
    outcome = await collect(provider, request())
    assert outcome.acc.usage.input_tokens == 105
    assert outcome.acc.usage.cache_read_tokens == 100


async def test_a_tool_call_with_fragmented_arguments(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    path = "some/deeply/nested/directory/with a space/and-ünïcode.txt"
    fake_llm.script(
        {"text": "Let me look.", "tool_calls": [{"name": "read_file", "input": {"path": path}}]}
    )
    outcome = await collect(provider, request())
    fragments = [e for e in outcome.events if isinstance(e, BlockDelta) and e.kind == "input_json"]
    assert len(fragments) > 3  # split anywhere, inside keys and values
    (call,) = outcome.message.tool_uses
    assert call.name == "read_file" and call.input == {"path": path} and call.id
    assert call.input_error is None
    assert isinstance(outcome.message.content[0], TextBlock)
    end = outcome.events[-1]
    assert isinstance(end, StreamEnd) and end.stop_reason == "tool_use"


async def test_parallel_calls_get_distinct_blocks(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    calls = [{"name": "read_file", "input": {"path": f"f{i}.txt"}} for i in range(3)]
    fake_llm.script({"tool_calls": calls})
    outcome = await collect(provider, request())
    uses = outcome.message.tool_uses
    assert [u.input for u in uses] == [{"path": "f0.txt"}, {"path": "f1.txt"}, {"path": "f2.txt"}]
    assert len({u.id for u in uses}) == 3
    starts = [e for e in outcome.events if isinstance(e, BlockStart) and e.kind == "tool_use"]
    assert len({s.index for s in starts}) == 3


async def test_thinking_becomes_a_thinking_block(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"thinking": "First, the plan.", "text": "Done."})
    outcome = await collect(provider, request())
    thinking, text = outcome.message.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == "First, the plan."
    assert isinstance(text, TextBlock) and text.text == "Done."
    if provider.name == "anthropic":
        assert thinking.signature
    if provider.name == "openai-responses":
        assert thinking.meta["item"]["type"] == "reasoning"


async def test_an_empty_response_still_ends(provider: Provider, fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"empty": True})
    outcome = await collect(provider, request())
    assert outcome.message.content == ()
    assert isinstance(outcome.events[-1], StreamEnd)


@pytest.mark.parametrize("status", [429, 500, 503, 529])
async def test_http_errors_before_the_stream_are_retried(
    provider: Provider, fake_llm: FakeLLMServer, status: int
) -> None:
    fake_llm.script(
        {"http_error": {"status": status}}, {"http_error": {"status": status}}, {"text": "ok"}
    )
    outcome = await collect(provider, request())
    assert [r.attempt for r in outcome.retries] == [1, 2]
    assert f"HTTP {status}" in outcome.retries[0].error
    assert outcome.message.text == "ok"
    assert isinstance(outcome.events[0], RetryNotice)  # nothing before the notice


async def test_retries_run_out(protocol: str, fake_llm: FakeLLMServer, http_client: str) -> None:
    provider = make_provider(protocol, fake_llm, max_retries=1, http_client=http_client)
    try:
        fake_llm.script({"http_error": {"status": 529}}, {"http_error": {"status": 529}})
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    assert len(outcome.retries) == 1
    assert isinstance(outcome.error, ProviderHTTPError)
    assert outcome.error.status == 529 and outcome.error.retryable
    assert "Overloaded" in str(outcome.error)


async def test_a_bad_request_is_not_retried(provider: Provider, fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"http_error": {"status": 400, "message": "max_tokens: too large"}})
    outcome = await drain(provider, request())
    assert outcome.retries == []
    assert isinstance(outcome.error, ProviderHTTPError) and outcome.error.status == 400
    assert "max_tokens: too large" in str(outcome.error) and not outcome.error.retryable


async def test_authentication_errors_name_the_key(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"http_error": {"status": 401}})
    outcome = await drain(provider, request())
    assert isinstance(outcome.error, ProviderHTTPError) and outcome.error.status == 401
    key = "ANTHROPIC_API_KEY" if provider.name == "anthropic" else "OPENAI_API_KEY"
    assert key in str(outcome.error)


async def test_an_error_mid_stream_is_a_stream_error_after_the_events(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"text": LONG, "error_after": 6})
    outcome = await drain(provider, request())
    assert isinstance(outcome.error, StreamError) and outcome.error.retryable
    assert outcome.retries == []
    partial = outcome.acc.partial_message()
    assert partial is not None and LONG.startswith(partial.text) and partial.text
    assert fake_llm.remaining == 0


async def test_an_error_before_the_stream_starts_is_retried(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"text": "lost", "error_after": 0}, {"text": "ok"})
    outcome = await collect(provider, request())
    assert len(outcome.retries) == 1 and outcome.message.text == "ok"


async def test_a_dropped_connection_mid_stream_is_a_stream_error(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"text": LONG, "drop_after": 6})
    outcome = await drain(provider, request())
    assert isinstance(outcome.error, StreamError) and outcome.error.retryable
    assert outcome.acc.has_content


async def test_a_connection_dropped_before_any_event_is_retried(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"text": "lost", "drop_after": 0}, {"text": "ok"})
    outcome = await collect(provider, request())
    assert len(outcome.retries) == 1 and outcome.message.text == "ok"


async def test_a_connection_dropped_after_an_empty_first_event_is_not_retried(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    # The first frame (a role chunk, ``response.created``…) may map to no neutral event: the
    # stream has started all the same, so the drop is the loop's to handle, not a retry.
    fake_llm.script({"text": "lost", "drop_after": 1}, {"text": "retried"})
    outcome = await drain(provider, request())
    assert isinstance(outcome.error, StreamError) and not outcome.retries


async def test_an_unreachable_server_is_a_connection_error(protocol: str, http_client: str) -> None:
    with FakeLLMServer() as server:
        provider = make_provider(protocol, server, max_retries=1, http_client=http_client)
    try:  # the server is gone: nothing listens on its port any more
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    assert isinstance(outcome.error, ProviderConnectionError)
    assert len(outcome.retries) == 1
    # A refused connection is said as one, on either client: not as a stall or a timeout
    # (the OpenAI SDK's aiohttp transport names it a ConnectTimeout).
    said = str(outcome.error)
    assert said.startswith(f"cannot reach {provider.api}: ")
    assert "stalled" not in said and "timed out" not in said.lower()


async def test_cancelling_a_stalled_stream_ends_promptly(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"text": LONG, "stall_after": 6})
    first_delta = asyncio.Event()

    async def consume() -> None:
        async with contextlib.aclosing(provider.stream(request())) as stream:
            async for event in stream:
                if isinstance(event, BlockDelta):
                    first_delta.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_delta.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=5)


async def test_the_provider_is_reusable_after_a_cancelled_stream(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"text": LONG, "stall_after": 6}, {"text": "again"})
    started = asyncio.Event()

    async def consume() -> None:
        async for event in provider.stream(request()):
            if isinstance(event, BlockDelta):
                started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), timeout=10)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    outcome = await collect(provider, request())
    assert outcome.message.text == "again"


async def test_tool_specs_reach_the_request(provider: Provider, fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"text": "ok"})
    await collect(provider, request())
    body = fake_llm.requests[0].body
    tools = body["tools"]
    assert len(tools) == 1
    assert "read_file" in str(tools[0]) and body["stream"] is True


async def test_a_tool_use_block_survives_json_split_inside_escapes(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    content = 'line one\nline "two"\t\\ tab ✓'
    fake_llm.script(
        {"tool_calls": [{"name": "write_file", "input": {"path": "a", "content": content}}]}
    )
    outcome = await collect(provider, request())
    (call,) = outcome.message.tool_uses
    assert isinstance(call, ToolUseBlock) and call.input == {"path": "a", "content": content}
