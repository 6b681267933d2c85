"""Every recorded real stream (``tests/fixtures/wire``) replayed through the real SDK.

The fake server sends each recording verbatim (``raw:``); the SDK's raw streaming API
(``stream=True``) must turn every event into an object without failing, in the order and number
the recording holds — except where the recording itself carries an error the SDK is meant to
raise. A few invariants of the recorded content are checked too (the tool-argument fragments of
a finished call join into a JSON object), so a damaged extraction shows up here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from drover.testing import FakeLLMServer
from drover.testing.wire import split_frames

from .conftest import USER

FIXTURES = Path(__file__).parent.parent / "fixtures" / "wire"


@dataclass(frozen=True)
class Recording:
    path: str
    #: Tools the recorded reply calls; the replayed request offers them.
    tools: tuple[str, ...] = ()
    #: The stream carries an error event or chunk, which the SDK raises when it reaches it.
    raises: bool = False

    @property
    def protocol(self) -> str:
        return self.path.split("/")[0]

    @property
    def file(self) -> Path:
        return FIXTURES / self.path


RECORDINGS = (
    Recording("anthropic/text.sse"),
    Recording("anthropic/tool-use.sse", tools=("get_weather",)),
    Recording("anthropic/text-then-tool-use.sse", tools=("weather",)),
    Recording("anthropic/thinking-then-tool-use.sse", tools=("weather",)),
    Recording("anthropic/redacted-thinking.sse"),
    Recording("anthropic/max-tokens-mid-tool-input.sse", tools=("make_file",)),
    Recording("anthropic/litellm-openai-midstream-error.sse", raises=True),
    Recording("openai_chat/text-include-usage.sse"),
    Recording("openai_chat/parallel-tool-calls.sse", tools=("GetWeatherArgs", "get_stock_price")),
    Recording("openai_chat/refusal.sse"),
    Recording("openai_chat/ollama-text.sse"),
    Recording("openai_chat/ollama-parallel-tool-calls.sse", tools=("run_command",)),
    Recording("openai_chat/vllm-tool-call.sse", tools=("run_command", "run_script")),
    Recording("openai_chat/llamacpp-reasoning-tool-call.sse", tools=("weather",)),
    Recording("openai_chat/openrouter-tool-call.sse", tools=("weather",)),
    Recording("openai_chat/openrouter-midstream-error.sse", raises=True),
    Recording("openai_chat/groq-tool-call.sse", tools=("weather",)),
    Recording("openai_chat/xai-tool-call.sse", tools=("weather",)),
    Recording("openai_chat/litellm-midstream-overload.sse", raises=True),
    Recording("openai_chat/litellm-anthropic-midstream-overload.sse", raises=True),
    Recording("openai_responses/text.sse"),
    Recording("openai_responses/function-call.sse", tools=("weather",)),
    Recording("openai_responses/reasoning-then-function-call.sse", tools=("weather",)),
    Recording("openai_responses/refusal.sse"),
    Recording("openai_responses/incomplete-max-output-tokens.sse"),
    Recording("openai_responses/openrouter-reasoning-text.sse"),
    Recording("openai_responses/litellm-anthropic-failed.sse"),
)


@dataclass(frozen=True)
class Event:
    """One SSE event as the spec reads it: the ``event:`` field and the joined ``data:`` lines."""

    name: str | None
    data: str


def sse_events(body: bytes) -> list[Event]:
    """The events of a recording (comments and empty events skipped), by the SSE spec.

    As the spec says, an event the body ends in before its blank line is not dispatched.
    """
    events: list[Event] = []
    for frame in split_frames(body):
        if not frame.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
            break
        name: str | None = None
        data: list[str] = []
        for line in frame.decode().splitlines():
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if data:
            events.append(Event(name, "\n".join(data)))
    return events


def expected_payloads(recording: Recording) -> list[dict[str, Any]]:
    """The payloads the SDK should hand out, in order, before it ends or raises."""
    payloads: list[dict[str, Any]] = []
    for event in sse_events(recording.file.read_bytes()):
        if recording.protocol == "anthropic":
            # The Anthropic SDK skips ``ping`` and events without a name; ``error`` raises.
            if event.name in (None, "ping"):
                continue
            if event.name == "error":
                break
        elif event.data.startswith("[DONE]"):
            break
        payload = json.loads(event.data)
        if recording.protocol != "anthropic" and payload.get("error"):
            break  # the OpenAI SDK raises on a payload with an ``error`` member
        payloads.append(payload)
    return payloads


def test_every_recording_is_listed() -> None:
    on_disk = {str(path.relative_to(FIXTURES)) for path in FIXTURES.rglob("*.sse")}
    assert on_disk == {recording.path for recording in RECORDINGS}


def test_the_readme_names_every_recording() -> None:
    readme = (FIXTURES / "README.md").read_text()
    for recording in RECORDINGS:
        assert f"`{recording.path.split('/')[1]}`" in readme, recording.path


def anthropic_tools(names: tuple[str, ...]) -> list[Any]:
    schema = {"type": "object", "properties": {}}
    return [{"name": name, "description": name, "input_schema": schema} for name in names]


def chat_tools(names: tuple[str, ...]) -> list[Any]:
    schema = {"type": "object", "properties": {}}
    return [{"type": "function", "function": {"name": n, "parameters": schema}} for n in names]


def responses_tools(names: tuple[str, ...]) -> list[Any]:
    schema = {"type": "object", "properties": {}}
    return [{"type": "function", "name": n, "parameters": schema, "strict": False} for n in names]


async def anthropic_events(server: FakeLLMServer, recording: Recording) -> AsyncIterator[Any]:
    client = anthropic.AsyncAnthropic(
        base_url=server.anthropic_base_url, api_key="t", max_retries=0
    )
    extra: dict[str, Any] = {"tools": anthropic_tools(recording.tools)} if recording.tools else {}
    try:
        stream = await client.messages.create(
            model="claude-test", max_tokens=4096, messages=USER, stream=True, **extra
        )
        async for event in stream:
            yield event
    finally:
        await client.close()


async def openai_events(server: FakeLLMServer, recording: Recording) -> AsyncIterator[Any]:
    client = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="t", max_retries=0)
    try:
        if recording.protocol == "openai_chat":
            extra: dict[str, Any] = (
                {"tools": chat_tools(recording.tools)} if recording.tools else {}
            )
            chunks = await client.chat.completions.create(
                model="gpt-test",
                messages=USER,
                stream=True,
                stream_options={"include_usage": True},
                **extra,
            )
            async for chunk in chunks:
                yield chunk
        else:
            extra = {"tools": responses_tools(recording.tools)} if recording.tools else {}
            events = await client.responses.create(
                model="gpt-test", input="hi", stream=True, **extra
            )
            async for event in events:
                yield event
    finally:
        await client.close()


async def replay(server: FakeLLMServer, recording: Recording, into: list[Any]) -> None:
    server.script({"raw": str(recording.file)})
    source = anthropic_events if recording.protocol == "anthropic" else openai_events
    async for item in source(server, recording):
        into.append(item)


def check_tool_arguments(recording: Recording, payloads: list[dict[str, Any]]) -> None:
    """A finished tool call's argument fragments join into a JSON object."""
    if recording.protocol == "anthropic":
        fragments: dict[int, list[str]] = {}
        for p in payloads:
            if p["type"] == "content_block_start" and p["content_block"]["type"] == "tool_use":
                fragments[p["index"]] = []
            elif p["type"] == "content_block_delta" and p["delta"]["type"] == "input_json_delta":
                fragments[p["index"]].append(p["delta"]["partial_json"])
            elif p["type"] == "content_block_stop" and p["index"] in fragments:
                assert isinstance(json.loads("".join(fragments.pop(p["index"]))), dict)
    elif recording.protocol == "openai_chat":
        arguments: dict[int, str] = {}
        finished = False
        for p in payloads:
            for choice in p["choices"]:
                for call in choice["delta"].get("tool_calls") or []:
                    piece = (call.get("function") or {}).get("arguments") or ""
                    arguments[call["index"]] = arguments.get(call["index"], "") + piece
                finished |= choice.get("finish_reason") == "tool_calls"
        if finished:
            assert arguments
            assert all(isinstance(json.loads(text), dict) for text in arguments.values())
    else:
        deltas: dict[str, str] = {}
        for p in payloads:
            if p["type"] == "response.function_call_arguments.delta":
                deltas[p["item_id"]] = deltas.get(p["item_id"], "") + p["delta"]
            elif p["type"] == "response.function_call_arguments.done":
                assert deltas[p["item_id"]] == p["arguments"]
                assert isinstance(json.loads(p["arguments"]), dict)


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda r: r.path)
async def test_the_real_sdk_parses_every_recorded_event(
    fake_llm: FakeLLMServer, recording: Recording
) -> None:
    expected = expected_payloads(recording)
    seen: list[Any] = []
    if recording.raises:
        error = anthropic.APIError if recording.protocol == "anthropic" else openai.APIError
        with pytest.raises(error):
            await replay(fake_llm, recording, seen)
    else:
        await replay(fake_llm, recording, seen)
    assert expected
    assert len(seen) == len(expected)
    if recording.protocol == "openai_chat":
        assert [chunk.id for chunk in seen] == [p["id"] for p in expected]
        assert all(chunk.object == "chat.completion.chunk" for chunk in seen)
    else:
        assert [event.type for event in seen] == [p["type"] for p in expected]
    check_tool_arguments(recording, expected)
    assert fake_llm.remaining == 0


@pytest.mark.parametrize(
    ("path", "tail"),
    [
        # The file ends without the blank line after ``message_stop``; the SDK, like the
        # SSE spec, drops that unfinished event.
        ("anthropic/max-tokens-mid-tool-input.sse", "message_delta"),
        ("openai_responses/incomplete-max-output-tokens.sse", "response.incomplete"),
        ("openai_responses/refusal.sse", "response.completed"),
    ],
)
async def test_recordings_end_as_described(fake_llm: FakeLLMServer, path: str, tail: str) -> None:
    recording = next(r for r in RECORDINGS if r.path == path)
    seen: list[Any] = []
    await replay(fake_llm, recording, seen)
    assert seen[-1].type == tail
