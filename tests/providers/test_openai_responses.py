"""Responses specifics: previous_response_id and its fallback, reasoning items, the mapper."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import pytest
from openai._models import construct_type  # how the SDK itself builds stream events
from openai.types.responses import ResponseStreamEvent

from drover.core.messages import (
    Message,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    tool_result_message,
    user_message,
)
from drover.core.model_stream import BlockDelta, BlockStart, BlockStop, StreamEnd
from drover.errors import StreamError
from drover.providers.openai_responses import (
    OpenAIResponsesProvider,
    ResponsesEvents,
    refuses_stored_state,
)
from drover.testing import Scenario
from drover.testing.server import FakeLLMServer

from .conftest import Outcome, collect, drain, make_provider, request

READ_A = {"tool_calls": [{"name": "read_file", "input": {"path": "a"}}]}


async def two_turns(
    provider: OpenAIResponsesProvider, first: dict[str, Any], server: FakeLLMServer
) -> tuple[Outcome, Outcome, list[Message]]:
    """A response with a tool call, then the request that answers it."""
    server.script(first, {"text": "done"})
    one = await collect(provider, request(user_message("read a")))
    results = tool_result_message(
        [ToolResultBlock(tool_use_id=u.id, content="AAA") for u in one.message.tool_uses]
    )
    history = [user_message("read a"), one.message, results]
    two = await collect(provider, request(*history))
    return one, two, [*history, two.message]


def provider_for(server: FakeLLMServer, store: bool | None = None) -> OpenAIResponsesProvider:
    provider = make_provider("openai-responses", server, store=store)
    assert isinstance(provider, OpenAIResponsesProvider)
    return provider


async def test_meta_and_ids(fake_llm: FakeLLMServer) -> None:
    provider = provider_for(fake_llm)
    fake_llm.script({"text": "Reading.", **READ_A})
    outcome = await collect(provider, request())
    await provider.aclose()
    text, call = outcome.message.content
    assert text.meta["item_id"].startswith("msg_")
    assert isinstance(call, ToolUseBlock) and call.id.startswith("call_")
    assert call.meta["item_id"].startswith("fc_") and call.meta["provider"] == "openai-responses"
    meta = outcome.message.meta
    assert meta["provider"] == "openai-responses" and meta["response_id"].startswith("resp_")
    body = fake_llm.requests[0].body
    assert body["instructions"] == "Be brief." and body["max_output_tokens"] == 8192
    assert body["tools"][0] == {
        "type": "function",
        "name": "read_file",
        "description": "Read a file.",
        "parameters": body["tools"][0]["parameters"],
        "strict": False,
    }
    assert "store" not in body and "include" not in body and "previous_response_id" not in body


async def test_stored_responses_are_continued_with_previous_response_id(
    fake_llm: FakeLLMServer,
) -> None:
    provider = provider_for(fake_llm)
    one, _two, history = await two_turns(provider, {"thinking": "plan", **READ_A}, fake_llm)
    fake_llm.script({"text": "and more"})
    await collect(provider, request(*history, user_message("more?")))
    await provider.aclose()
    second, third = (r.body for r in fake_llm.requests[1:])
    assert second["previous_response_id"] == one.message.meta["response_id"]
    call = one.message.tool_uses[0]
    assert second["input"] == [
        {"type": "function_call_output", "call_id": call.id, "output": "AAA"}
    ]
    assert third["previous_response_id"] == history[-1].meta["response_id"]
    assert third["input"] == [{"role": "user", "content": "more?"}]
    assert provider.server_stores


async def test_a_refused_previous_response_id_falls_back_to_the_whole_input_for_good() -> None:
    scenario = Scenario.from_data({"options": {"store_responses": False}, "responses": []})
    with FakeLLMServer(scenario) as server:
        provider = provider_for(server)
        one, two, history = await two_turns(provider, {"thinking": "plan", **READ_A}, server)
        server.script({"text": "and more"})
        third = await collect(provider, request(*history, user_message("more?")))
        await provider.aclose()
        bodies = [r.body for r in server.requests]
        assert server.violations == [] and server.unexpected == []
    assert len(bodies) == 4  # the refused request, then its immediate replay
    assert bodies[1]["previous_response_id"] == one.message.meta["response_id"]
    assert "previous_response_id" not in bodies[2] and "previous_response_id" not in bodies[3]
    assert bodies[2]["input"][0] == {"role": "user", "content": "read a"}
    assert bodies[2]["include"] == ["reasoning.encrypted_content"]
    assert bodies[3]["input"][-1] == {"role": "user", "content": "more?"}
    assert two.retries == [] and third.message.text == "and more"
    assert not provider.server_stores
    # Ids of items the server never stored are not sent; the unencrypted reasoning is left out.
    assert not any("id" in item for item in bodies[2]["input"])


async def test_store_false_never_chains_and_sends_reasoning_back_encrypted(
    fake_llm: FakeLLMServer,
) -> None:
    provider = provider_for(fake_llm, store=False)
    one, _two, _history = await two_turns(provider, {"thinking": "plan", **READ_A}, fake_llm)
    await provider.aclose()
    first, second = (r.body for r in fake_llm.requests)
    assert first["store"] is False and first["include"] == ["reasoning.encrypted_content"]
    assert "previous_response_id" not in second
    reasoning = one.message.content[0]
    assert isinstance(reasoning, ThinkingBlock) and reasoning.thinking == "plan"
    item = reasoning.meta["item"]
    assert item["encrypted_content"] and item["id"].startswith("rs_")
    assert second["input"][1] == item  # exactly as it came
    assert second["input"][2]["type"] == "function_call" and "id" not in second["input"][2]


async def test_a_history_changed_since_the_response_is_sent_whole(
    fake_llm: FakeLLMServer,
) -> None:
    provider = provider_for(fake_llm)
    one, _two, history = await two_turns(provider, {"thinking": "plan", **READ_A}, fake_llm)
    fake_llm.script({"text": "ok"})
    compacted = [user_message("(summary of earlier work)"), *history[1:], user_message("go on")]
    await collect(provider, request(*compacted))
    await provider.aclose()
    body = fake_llm.requests[2].body
    assert "previous_response_id" not in body
    items = body["input"]
    assert items[0] == {"role": "user", "content": "(summary of earlier work)"}
    # While the server stores, genuine item ids and the reasoning item go back as they came.
    assert items[1] == one.message.content[0].meta["item"]
    assert items[2]["id"] == one.message.content[1].meta["item_id"]


@pytest.mark.parametrize(
    ("reason", "expected"), [("max_tokens", "max_tokens"), ("refusal", "refusal")]
)
async def test_incomplete_responses(fake_llm: FakeLLMServer, reason: str, expected: str) -> None:
    provider = provider_for(fake_llm)
    fake_llm.script({"text": "cut", "stop_reason": reason})
    outcome = await collect(provider, request())
    await provider.aclose()
    assert outcome.acc.stop_reason == expected and outcome.message.text == "cut"


async def test_response_failed_is_a_stream_error(fake_llm: FakeLLMServer) -> None:
    provider = provider_for(fake_llm)
    fake_llm.script(
        {
            "text": "abcdefghijklmnopqrstuvwxyz",
            "error_after": 6,
            "error": {"type": "failed", "message": "model crashed"},
        }
    )
    outcome = await drain(provider, request())
    await provider.aclose()
    assert isinstance(outcome.error, StreamError) and outcome.error.retryable
    assert "model crashed" in str(outcome.error)
    assert outcome.acc.has_content


async def test_an_error_event_is_a_failure_not_an_event(fake_llm: FakeLLMServer) -> None:
    provider = provider_for(fake_llm)
    fake_llm.script(
        {
            "text": "abcdefghijklmnopqrstuvwxyz",
            "error_after": 6,
            "error": {"type": "invalid_request_error", "message": "bad"},
        }
    )
    outcome = await drain(provider, request())
    await provider.aclose()
    assert isinstance(outcome.error, StreamError) and not outcome.error.retryable
    assert outcome.error.error_type == "invalid_request_error"


# --- the event mapper ----------------------------------------------------------------------


def sdk_event(data: dict[str, Any]) -> ResponseStreamEvent:
    event: ResponseStreamEvent = construct_type(type_=ResponseStreamEvent, value=data)
    return event


def feed(mapper: ResponsesEvents, *events: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for i, data in enumerate(events):
        out += mapper.feed(sdk_event({**data, "sequence_number": i}))
    return out


def response(status: str = "completed", **extra: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": status, "output": [], **extra}


def test_items_delivered_only_when_done_are_passed_on_whole() -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "hello", "annotations": []}],
    }
    call = {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "x",
        "arguments": '{"a":1}',
    }
    out = feed(
        ResponsesEvents(),
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {"type": "response.output_item.done", "output_index": 1, "item": call},
        {"type": "response.completed", "response": response()},
    )
    assert out[:6] == [
        BlockStart(index=0, kind="text", meta={"provider": "openai-responses", "item_id": "msg_1"}),
        BlockDelta(index=0, kind="text", data="hello"),
        BlockStop(index=0),
        BlockStart(
            index=1,
            kind="tool_use",
            id="call_1",
            name="x",
            meta={"provider": "openai-responses", "item_id": "fc_1"},
        ),
        BlockDelta(index=1, kind="input_json", data='{"a":1}'),
        BlockStop(index=1, meta={"item_id": "fc_1"}),
    ]
    end = out[-1]
    assert isinstance(end, StreamEnd) and end.stop_reason == "tool_use"
    assert end.meta["response_id"] == "resp_1" and end.usage.partial


def test_reasoning_summary_parts_are_separated() -> None:
    item = {"id": "rs_1", "type": "reasoning", "summary": []}
    out = feed(
        ResponsesEvents(),
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {
            "type": "response.reasoning_summary_text.delta",
            "output_index": 0,
            "item_id": "rs_1",
            "summary_index": 0,
            "delta": "one",
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "output_index": 0,
            "item_id": "rs_1",
            "summary_index": 1,
            "delta": "two",
        },
    )
    assert [e.data for e in out if isinstance(e, BlockDelta)] == ["one", "\n\ntwo"]


def test_built_in_tool_items_and_unknown_events_are_skipped() -> None:
    out = feed(
        ResponsesEvents(),
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "ws_1", "type": "web_search_call", "status": "in_progress"},
        },
        {"type": "response.web_search_call.searching", "output_index": 0, "item_id": "ws_1"},
        {"type": "response.something_new", "output_index": 0},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"id": "ws_1", "type": "web_search_call", "status": "completed"},
        },
    )
    assert out == []


def test_a_stream_cut_before_completion_is_an_error() -> None:
    mapper = ResponsesEvents()
    feed(mapper, {"type": "response.created", "response": response("in_progress")})
    with pytest.raises(StreamError):
        mapper.finish()


def status_error(status: int, body: dict[str, Any]) -> openai.APIStatusError:
    response = httpx2.Response(status, request=httpx2.Request("POST", "http://x/v1/responses"))
    return openai.APIStatusError(f"Error code: {status} - {body}", response=response, body=body)


def test_which_errors_mean_the_stored_state_is_gone() -> None:
    assert refuses_stored_state(
        status_error(
            400,
            {
                "message": "Previous response with id 'r' not found.",
                "param": "previous_response_id",
                "code": "previous_response_not_found",
            },
        )
    )
    assert refuses_stored_state(
        status_error(400, {"message": "x", "param": "previous_response_id"})
    )
    assert refuses_stored_state(
        status_error(
            404,
            {
                "message": "Item with id 'rs_1' not found. Items are not persisted when "
                "`store` is set to false."
            },
        )
    )
    assert not refuses_stored_state(status_error(400, {"message": "max_output_tokens too large"}))
    assert not refuses_stored_state(status_error(500, {"message": "previous_response_id oops"}))
