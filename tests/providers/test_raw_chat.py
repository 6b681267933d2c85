"""Chat Completions streams read from the response's bytes, as the SDK reads them: ``[DONE]``
ends the stream whatever follows it, an error chunk fails the attempt, and the chunks' JSON
gives the same text, call and usage the SDK's models gave."""

from __future__ import annotations

import json
from typing import Any

import pytest

from drover.core.model_stream import BlockDelta, BlockStart, StreamEnd
from drover.errors import StreamError
from drover.providers import sse
from drover.testing.server import FakeLLMServer

from .conftest import drain, make_provider, request


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return f"data: {json.dumps(body)}\n\n"


ANSWER = (
    _chunk({"role": "assistant", "content": "Hel"})
    + ": a comment line\n\n"
    + _chunk({"content": "lo"})
    + _chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path":'},
                }
            ]
        }
    )
    + _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "a.txt"}'}}]})
    + _chunk({}, "tool_calls")
    + 'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    '"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10,'
    '"prompt_tokens_details":{"cached_tokens":2}}}\n\n'
)


async def test_done_ends_the_stream_whatever_follows(fake_llm: FakeLLMServer) -> None:
    fake_llm.script({"raw_text": ANSWER + "data: [DONE]\n\ndata: not json at all\n\n"})
    provider = make_provider("openai", fake_llm, max_retries=0)
    try:
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    assert outcome.error is None, outcome.error
    texts = [e.data for e in outcome.events if isinstance(e, BlockDelta) and e.kind == "text"]
    assert "".join(texts) == "Hello"
    calls = [e for e in outcome.events if isinstance(e, BlockStart) and e.kind == "tool_use"]
    assert [(c.id, c.name) for c in calls] == [("call_1", "read_file")]
    args = [e.data for e in outcome.events if isinstance(e, BlockDelta) and e.kind == "input_json"]
    assert json.loads("".join(args)) == {"path": "a.txt"}
    end = outcome.events[-1]
    assert isinstance(end, StreamEnd) and end.stop_reason == "tool_use"
    assert (end.usage.input_tokens, end.usage.output_tokens, end.usage.cache_read_tokens) == (
        7,
        3,
        2,
    )


async def test_an_error_chunk_fails_the_attempt(fake_llm: FakeLLMServer) -> None:
    error = 'data: {"error": {"message": "the model is overloaded", "type": "server_error"}}\n\n'
    fake_llm.script({"raw_text": _chunk({"content": "Hel"}) + error + ANSWER + "data: [DONE]\n\n"})
    provider = make_provider("openai", fake_llm, max_retries=0)
    try:
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    assert isinstance(outcome.error, StreamError), outcome.error
    assert "the model is overloaded" in str(outcome.error)


async def test_a_line_longer_than_allowed_is_malformed_data(
    fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (a server or a proxy that never ends a line would otherwise be held in memory without
    # bound; the real limit is 64 MiB, lowered here)
    monkeypatch.setattr(sse, "MAX_LINE_BYTES", 1_000)
    fake_llm.script({"raw_text": _chunk({"role": "assistant", "content": "Hel"}) + "x" * 5_000})
    provider = make_provider("openai", fake_llm, max_retries=0)
    try:
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    assert isinstance(outcome.error, StreamError)
    assert "sent malformed data: an event-stream line longer than 1,000 bytes" in str(outcome.error)
