"""The renderers as pure functions: any text and arguments, cut anywhere, join back whole."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from drover.testing import ScenarioOptions, ScriptedResponse, ToolCall
from drover.testing.wire import IdSource, RenderContext, anthropic, openai_chat, openai_responses

TEXT = st.text(min_size=1, max_size=60)
INPUTS = st.dictionaries(st.text(max_size=8), st.text(max_size=20) | st.integers(), max_size=4)


def context(chunk: int, json_chunk: int) -> RenderContext:
    options = ScenarioOptions(chunk_size=chunk, json_chunk=json_chunk)
    body = {"model": "m", "stream_options": {"include_usage": True}}
    return RenderContext(body=body, raw_size=100, options=options, ids=IdSource(), serial=1)


def payloads(frames: tuple[bytes, ...]) -> list[dict[str, Any]]:
    out = []
    for frame in frames:
        data = frame.decode().split("data: ", 1)[1].strip()
        if data != "[DONE]":
            out.append(json.loads(data))
    return out


@settings(max_examples=40, deadline=None)
@given(TEXT, INPUTS, st.integers(1, 9), st.integers(1, 9))
def test_fragments_join_back_whole(
    text: str, tool_input: dict[str, Any], chunk: int, json_chunk: int
) -> None:
    response = ScriptedResponse(text=text, tool_calls=(ToolCall(name="t", input=tool_input),))

    events = payloads(anthropic.render_stream(response, context(chunk, json_chunk)).frames)
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(d.get("text", "") for d in deltas) == text
    assert json.loads("".join(d.get("partial_json", "") for d in deltas)) == tool_input

    chunks = payloads(openai_chat.render_stream(response, context(chunk, json_chunk)).frames)
    chat = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content") or "" for d in chat) == text
    arguments = "".join(
        call["function"].get("arguments", "") for d in chat for call in d.get("tool_calls", [])
    )
    assert json.loads(arguments) == tool_input

    items = payloads(openai_responses.render_stream(response, context(chunk, json_chunk)).frames)
    assert [e["sequence_number"] for e in items] == list(range(len(items)))
    by_type: dict[str, str] = {}
    for e in items:
        if e["type"].endswith(".delta"):
            by_type[e["type"]] = by_type.get(e["type"], "") + e["delta"]
    assert by_type["response.output_text.delta"] == text
    assert json.loads(by_type["response.function_call_arguments.delta"]) == tool_input
