"""One scenario, three APIs: what each real SDK sees for text, thinking, tools, usage, stops."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from drover.testing import FakeLLMServer, Scenario

from .conftest import USER, Collect

EXPECTED_STOP = {
    "end_turn": {"anthropic": "end_turn", "openai-chat": "stop", "openai-responses": "completed"},
    "tool_use": {
        "anthropic": "tool_use",
        "openai-chat": "tool_calls",
        "openai-responses": "completed",
    },
    "max_tokens": {
        "anthropic": "max_tokens",
        "openai-chat": "length",
        "openai-responses": "incomplete:max_output_tokens",
    },
    "refusal": {
        "anthropic": "refusal",
        "openai-chat": "content_filter",
        "openai-responses": "incomplete:content_filter",
    },
}


async def test_text_streams_in_chunks_with_scripted_usage(
    fake_llm: FakeLLMServer, collect: Collect, protocol: str
) -> None:
    fake_llm.script(
        {"text": "Hello there, friend.", "usage": {"input_tokens": 9, "output_tokens": 4}}
    )
    out = await collect()
    assert out.text == "Hello there, friend."
    assert out.text_deltas == ["Hello th", "ere, fri", "end."]
    assert (out.input_tokens, out.output_tokens) == (9, 4)
    assert out.stop == EXPECTED_STOP["end_turn"][protocol]
    assert fake_llm.remaining == 0


async def test_usage_is_estimated_when_not_scripted(
    fake_llm: FakeLLMServer, collect: Collect
) -> None:
    fake_llm.script({"text": "x" * 40})
    out = await collect()
    assert out.output_tokens == 10
    assert out.input_tokens is not None
    assert out.input_tokens > 0


async def test_thinking_comes_first(
    fake_llm: FakeLLMServer, collect: Collect, protocol: str
) -> None:
    fake_llm.script({"thinking": "pondering the question", "text": "Answer."})
    out = await collect()
    assert (out.thinking, out.text) == ("pondering the question", "Answer.")
    if protocol == "anthropic":
        kinds = [e.content_block.type for e in out.events if e.type == "content_block_start"]
        assert kinds == ["thinking", "text"]
        signatures = [
            e.delta.signature
            for e in out.events
            if e.type == "content_block_delta" and e.delta.type == "signature_delta"
        ]
        assert len(signatures) == 1
        assert signatures[0]


async def test_responses_reasoning_item_carries_encrypted_content_when_included(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.script({"thinking": "hmm", "text": "ok"}, {"thinking": "hmm", "text": "ok"})
    plain = await openai_client.responses.create(model="m", input="hi")
    assert plain.output[0].type == "reasoning"
    assert plain.output[0].encrypted_content is None
    stream = await openai_client.responses.create(
        model="m", input="hi", include=["reasoning.encrypted_content"], stream=True
    )
    done = [e async for e in stream if e.type == "response.output_item.done"]
    assert done[0].item.type == "reasoning"
    assert done[0].item.encrypted_content
    assert done[0].item.encrypted_content.startswith("gAAAA")
    assert done[0].item.summary[0].text == "hmm"


async def test_tool_calls_stream_in_fragments(
    fake_llm: FakeLLMServer, collect: Collect, protocol: str
) -> None:
    fake_llm.script(
        {
            "text": "Reading.",
            "tool_calls": [
                {"name": "read_file", "input": {"path": "a.txt"}},
                {"name": "bash", "input": {"command": "ls -la"}, "id": "toolu_x"},
            ],
        }
    )
    out = await collect()
    assert out.text == "Reading."
    assert [(name, json.loads(args)) for _id, name, args in out.calls] == [
        ("read_file", {"path": "a.txt"}),
        ("bash", {"command": "ls -la"}),
    ]
    generated, given = out.calls[0][0], out.calls[1][0]
    assert given == "toolu_x"
    assert generated
    assert generated.startswith("toolu_" if protocol == "anthropic" else "call_")
    for fragments in out.fragments:
        pieces = fragments[1:] if protocol == "anthropic" else fragments
        assert len(pieces) > 1
        assert all(len(p) <= 7 for p in pieces)
    if protocol == "anthropic":
        assert [f[0] for f in out.fragments] == ["", ""]
    assert out.stop == EXPECTED_STOP["tool_use"][protocol]


async def test_tool_only_answer_and_raw_broken_arguments(
    fake_llm: FakeLLMServer, collect: Collect
) -> None:
    fake_llm.script({"tool_calls": [{"name": "broken", "raw_input": '{"path": "a'}]})
    out = await collect()
    assert out.text == ""
    assert out.calls[0][1:] == ("broken", '{"path": "a')


@pytest.mark.parametrize("stop", ["max_tokens", "refusal", "end_turn"])
async def test_stop_reasons_map_per_protocol(
    fake_llm: FakeLLMServer, collect: Collect, protocol: str, stop: str
) -> None:
    fake_llm.script({"text": "cut", "stop_reason": stop})
    out = await collect()
    assert out.stop == EXPECTED_STOP[stop][protocol]


async def test_empty_response_is_complete_without_content(
    fake_llm: FakeLLMServer, collect: Collect, protocol: str
) -> None:
    fake_llm.script({"empty": True})
    out = await collect()
    assert (out.text, out.thinking, out.calls) == ("", "", [])
    assert out.stop == EXPECTED_STOP["end_turn"][protocol]
    assert out.output_tokens == 0


async def test_model_option_overrides_the_echoed_model(
    fake_llm: FakeLLMServer, collect: Collect, protocol: str
) -> None:
    fake_llm.script(
        Scenario.from_data({"options": {"model": "echo-9"}, "responses": [{"text": "a"}]})
    )
    out = await collect()
    first = out.events[0]
    model = (
        first.message.model
        if protocol == "anthropic"
        else (first.model if protocol == "openai-chat" else first.response.model)
    )
    assert model == "echo-9"


async def test_anthropic_ping_can_be_turned_off(fake_llm: FakeLLMServer) -> None:
    import httpx2

    fake_llm.script(Scenario.from_data({"options": {"ping": False}, "responses": [{"text": "a"}]}))
    async with httpx2.AsyncClient() as client:
        body = {"model": "m", "max_tokens": 5, "messages": USER, "stream": True}
        response = await client.post(f"{fake_llm.base_url}/v1/messages", json=body)
    assert b"event: ping" not in response.content


async def test_non_streamed_anthropic_message(
    fake_llm: FakeLLMServer, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    fake_llm.script(
        {
            "thinking": "t",
            "text": "Hi",
            "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}],
            "usage": {"input_tokens": 3, "output_tokens": 2},
        }
    )
    message = await anthropic_client.messages.create(model="c", max_tokens=5, messages=USER)
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[2].input == {"pattern": "*"}  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (3, 2)
    assert message.id.startswith("msg_")


async def test_non_streamed_chat_completion(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.script({"text": "Hi", "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]})
    completion = await openai_client.chat.completions.create(model="g", messages=USER)
    choice = completion.choices[0]
    assert choice.message.content == "Hi"
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.function.arguments == '{"pattern":"*"}'  # type: ignore[union-attr]
    assert completion.usage is not None
    assert completion.usage.completion_tokens > 0


async def test_non_streamed_response(
    fake_llm: FakeLLMServer, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.script({"text": "Hi", "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]})
    response = await openai_client.responses.create(model="g", input="hi")
    assert response.status == "completed"
    assert response.output_text == "Hi"
    assert [item.type for item in response.output] == ["message", "function_call"]
    assert response.id.startswith("resp_")
