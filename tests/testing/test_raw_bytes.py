"""The bytes on the wire, compared with each API's documented framing."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from drover.testing import FakeLLMServer

HI = {"text": "Hi!", "usage": {"input_tokens": 5, "output_tokens": 2}}
BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "anthropic": (
        "/v1/messages",
        {"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "openai-chat": (
        "/v1/chat/completions",
        {
            "model": "gpt-test",
            "messages": [{"role": "user", "content": "hi"}],
            "stream_options": {"include_usage": True},
        },
    ),
    "openai-responses": ("/v1/responses", {"model": "gpt-test", "input": "hi"}),
}


async def post(server: FakeLLMServer, protocol: str, **extra: Any) -> httpx2.Response:
    path, body = BODIES[protocol]
    async with httpx2.AsyncClient() as client:
        return await client.post(server.base_url + path, json={**body, "stream": True, **extra})


async def read_until_broken(response: httpx2.Response) -> bytes:
    received = b""
    try:
        async for piece in response.aiter_raw():
            received += piece
    except httpx2.RemoteProtocolError:
        return received
    raise AssertionError("the connection ended cleanly")


def frames(raw: bytes) -> list[bytes]:
    assert raw.endswith(b"\n\n")
    return [frame + b"\n\n" for frame in raw[:-2].split(b"\n\n")]


async def test_anthropic_stream_opens_as_documented(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(HI)
    response = await post(fake_llm, "anthropic")
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["request-id"].startswith("req_")
    message = (
        '{"id":"msg_01fake00000000000000000001","type":"message","role":"assistant",'
        '"model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,'
        '"usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,'
        '"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},'
        '"output_tokens":1,"service_tier":"standard"}}'
    )
    expected = (
        f'event: message_start\ndata: {{"type":"message_start","message":{message}}}\n\n'
        "event: content_block_start\n"
        'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'
        "\n\n"
        'event: ping\ndata: {"type": "ping"}\n\n'
        "event: content_block_delta\n"
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi!"}}'
        "\n\n"
        'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
        "event: message_delta\n"
        'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
        '"usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,'
        '"output_tokens":2}}\n\n'
        'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    assert response.text == expected


async def test_chat_stream_opens_as_documented(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(HI)
    response = await post(fake_llm, "openai-chat")
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    chunks = frames(response.content)
    envelope = (
        '{"id":"chatcmpl-fake0000000000000000000000001","object":"chat.completion.chunk",'
        '"created":1750000001,"model":"gpt-test","service_tier":"default",'
        '"system_fingerprint":"fp_fake0d1e2f","choices":'
    )
    assert (
        chunks[0]
        == (
            f'data: {envelope}[{{"index":0,'
            '"delta":{"role":"assistant","content":"","refusal":null},'
            '"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Zq8"}\n\n'
        ).encode()
    )
    assert chunks[1].startswith(
        f'data: {envelope}[{{"index":0,"delta":{{"content":"Hi!"}}'.encode()
    )
    assert b'"finish_reason":"stop"' in chunks[2]
    usage = json.loads(chunks[3][len(b"data: ") :])
    assert usage["choices"] == []
    assert usage["usage"]["total_tokens"] == 7
    assert chunks[4] == b"data: [DONE]\n\n"
    assert len(chunks) == 5
    assert all(not chunk.startswith(b"event:") for chunk in chunks)


async def test_responses_stream_opens_as_documented(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(HI)
    response = await post(fake_llm, "openai-responses")
    chunks = frames(response.content)
    assert chunks[0].startswith(
        b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_fake'
    )
    events = []
    for chunk in chunks:
        event_line, data_line = chunk.decode().strip().split("\n")
        payload = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {payload['type']}"
        assert next(iter(payload)) == "type"
        events.append(payload)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    delta = events[4]
    assert list(delta) == [
        "type",
        "content_index",
        "delta",
        "item_id",
        "logprobs",
        "obfuscation",
        "output_index",
        "sequence_number",
    ]
    assert events[-1]["response"]["usage"] == {
        "input_tokens": 5,
        "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 0},
        "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 7,
    }


ERROR_FRAMES = {
    "anthropic": (
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        b'"message":"Overloaded"},"request_id":"req_011fake00000000000000000001"}\n\n'
    ),
    "openai-chat": (
        b'data: {"error":{"message":"Overloaded","type":"server_error","param":null,'
        b'"code":null}}\n\n'
    ),
    "openai-responses": (
        b'event: error\ndata: {"type":"error","code":"server_error","message":"Overloaded",'
        b'"param":null,"sequence_number":4}\n\n'
    ),
}


@pytest.mark.parametrize("protocol", list(BODIES))
async def test_error_after_sends_n_frames_then_the_error(
    fake_llm: FakeLLMServer, protocol: str
) -> None:
    fake_llm.script({"text": "Hello there, friend.", "error_after": 4, "error": {}})
    response = await post(fake_llm, protocol)
    sent = frames(response.content)
    assert len(sent) == 5
    assert sent[-1] == ERROR_FRAMES[protocol]


@pytest.mark.parametrize("protocol", list(BODIES))
async def test_drop_after_closes_without_the_final_chunk(
    fake_llm: FakeLLMServer, protocol: str
) -> None:
    fake_llm.script({"text": "Hello there, friend.", "drop_after": 2})
    path, body = BODIES[protocol]
    async with httpx2.AsyncClient() as client:
        request = client.stream("POST", fake_llm.base_url + path, json={**body, "stream": True})
        async with request as response:
            received = await read_until_broken(response)
    assert len(frames(received)) == 2


@pytest.mark.parametrize("protocol", list(BODIES))
async def test_same_requests_give_identical_bytes(protocol: str) -> None:
    script = {
        "thinking": "think",
        "text": "Hello",
        "tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}, {"name": "glob"}],
    }

    async def run() -> bytes:
        with FakeLLMServer() as server:
            server.script(script, script)
            first = await post(server, protocol)
            second = await post(server, protocol)
            return first.content + second.content

    assert await run() == await run()
