"""Responses streams read from the response's bytes, as the SDK reads them: each event's JSON
gives the same text, reasoning, calls and usage the SDK's models gave; ``[DONE]`` ends the
stream whatever follows; ``response.failed``, ``error`` events, a payload with an ``error`` key,
an event without data and malformed JSON fail the attempt with the drover error (class, type,
message, retryable flag) the SDK's reading led to; unknown events and payloads that are not
JSON objects are skipped; keep-alive comments count as signs of life."""

from __future__ import annotations

import json
from typing import Any

import pytest

from drover.core.messages import TextBlock, ThinkingBlock, ToolUseBlock
from drover.errors import ContextOverflowError, StreamError
from drover.testing.server import FakeLLMServer

from .conftest import Outcome, drain, make_provider, request

API = "the OpenAI Responses API"


def frame(kind: str, sequence: int = 0, **fields: Any) -> str:
    """One event as the API sends it: its name, and ``type`` first in its data."""
    data = json.dumps({"type": kind, **fields, "sequence_number": sequence})
    return f"event: {kind}\ndata: {data}\n\n"


def response(status: str, output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": status, "output": output, **extra}


REASONING = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Thinking"}],
    "encrypted_content": "gAAAAABenc",
    # A field no SDK model knows: it must go back exactly as it came.
    "x_future": {"nested": [1, None, "two"]},
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}],
}
CALL = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_1",
    "name": "read_file",
    "arguments": '{"path": "a.txt"}',
    "status": "completed",
}
USAGE = {
    "input_tokens": 7,
    "input_tokens_details": {"cached_tokens": 2},
    "output_tokens": 3,
    "output_tokens_details": {"reasoning_tokens": 1},
    "total_tokens": 10,
}

OPENING = frame("response.created", 0, response=response("in_progress", [])) + frame(
    "response.in_progress", 1, response=response("in_progress", [])
)
REASONING_ITEM = (
    frame(
        "response.output_item.added",
        2,
        output_index=0,
        item={"id": "rs_1", "type": "reasoning", "summary": []},
    )
    + frame("response.reasoning_summary_part.added", 3, output_index=0, summary_index=0)
    + frame(
        "response.reasoning_summary_text.delta",
        4,
        item_id="rs_1",
        output_index=0,
        summary_index=0,
        delta="Think",
    )
    + frame(
        "response.reasoning_summary_text.delta",
        5,
        item_id="rs_1",
        output_index=0,
        summary_index=0,
        delta="ing",
    )
    + frame("response.output_item.done", 6, output_index=0, item=REASONING)
)
TEXT_ITEM = (
    frame(
        "response.output_item.added",
        7,
        output_index=1,
        item={**MESSAGE, "status": "in_progress", "content": []},
    )
    + frame("response.content_part.added", 8, output_index=1, content_index=0)
    + ": keep-alive comment\n\n"
    + frame(
        "response.output_text.delta",
        9,
        item_id="msg_1",
        output_index=1,
        content_index=0,
        delta="Hel",
        logprobs=[],
        obfuscation="xyz",
    )
    # An event type the SDK has no model for, and an object without a type: both skipped.
    + frame("response.something_new", 10, output_index=1, delta="NOT TEXT")
    + 'data: {"output_index": 1, "delta": "NOT TEXT EITHER"}\n\n'
    + frame(
        "response.output_text.delta",
        11,
        item_id="msg_1",
        output_index=1,
        content_index=0,
        delta="lo",
    ).replace("\n", "\r\n")
    + frame("response.output_text.done", 12, output_index=1, text="Hello")
    + frame("response.output_item.done", 13, output_index=1, item=MESSAGE)
)
CALL_ITEM = (
    frame(
        "response.output_item.added",
        14,
        output_index=2,
        item={**CALL, "arguments": "", "status": "in_progress"},
    )
    + frame(
        "response.function_call_arguments.delta", 15, item_id="fc_1", output_index=2, delta='{"pa'
    )
    + frame(
        "response.function_call_arguments.delta",
        16,
        item_id="fc_1",
        output_index=2,
        delta='th": "a.txt"}',
    )
    + frame(
        "response.function_call_arguments.done",
        17,
        item_id="fc_1",
        output_index=2,
        arguments=CALL["arguments"],
    )
    + frame("response.output_item.done", 18, output_index=2, item=CALL)
)
COMPLETED = frame(
    "response.completed",
    19,
    response=response("completed", [REASONING, MESSAGE, CALL], usage=USAGE),
)
WHOLE = OPENING + REASONING_ITEM + TEXT_ITEM + CALL_ITEM + COMPLETED
#: A short answer that completes: what follows an event that must fail the attempt, so that
#: dropping the event would end the stream normally instead.
SHORT = (
    frame("response.output_item.added", 30, output_index=5, item={**MESSAGE, "content": []})
    + frame("response.output_text.delta", 31, output_index=5, delta=" and more")
    + frame("response.completed", 32, response=response("completed", [], usage=USAGE))
)


async def read(fake_llm: FakeLLMServer, *bodies: str, max_retries: int = 0) -> Outcome:
    fake_llm.script(*({"raw_text": body} for body in bodies))
    provider = make_provider("openai-responses", fake_llm, max_retries=max_retries)
    try:
        return await drain(provider, request())
    finally:
        await provider.aclose()


def assert_whole_answer(outcome: Outcome) -> None:
    assert outcome.error is None, outcome.error
    thinking, text, call = outcome.message.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == "Thinking"
    assert thinking.meta["item"] == REASONING
    assert isinstance(text, TextBlock) and text.text == "Hello"
    assert text.meta == {"provider": "openai-responses", "item_id": "msg_1"}
    assert isinstance(call, ToolUseBlock) and (call.id, call.name) == ("call_1", "read_file")
    assert call.input == {"path": "a.txt"} and call.meta["item_id"] == "fc_1"
    usage = outcome.acc.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (7, 3, 2)
    assert outcome.acc.stop_reason == "tool_use"
    assert outcome.message.meta["response_id"] == "resp_1"


async def test_a_whole_response_is_read_from_its_bytes(fake_llm: FakeLLMServer) -> None:
    assert_whole_answer(await read(fake_llm, WHOLE))


@pytest.mark.parametrize(
    "payload",
    ["5", '"text"', "[1, 2]", "true", '{"type": "response.odd", "x": NaN, "y": 1e999}'],
    ids=["number", "string", "array", "boolean", "json-only-numbers"],
)
async def test_payloads_the_sdk_reads_nothing_from_are_skipped(
    fake_llm: FakeLLMServer, payload: str
) -> None:
    """Not an object, or an object of no event drover knows — even with numbers only Python's
    ``json`` reads (as the SDK does): skipped, and the answer around it is read whole."""
    body = OPENING + REASONING_ITEM + f"event: response.odd\ndata: {payload}\n\n"
    assert_whole_answer(await read(fake_llm, body + TEXT_ITEM + CALL_ITEM + COMPLETED))


async def test_a_null_payload_is_skipped(fake_llm: FakeLLMServer) -> None:
    """The SDK hands ``null`` over as None, which the SDK's reading took for the end of the
    stream (a complete answer then failed as cut short); read from the bytes it is skipped."""
    body = OPENING + REASONING_ITEM + "data: null\n\n" + TEXT_ITEM + CALL_ITEM + COMPLETED
    assert_whole_answer(await read(fake_llm, body))


async def test_done_ends_the_stream_whatever_follows(fake_llm: FakeLLMServer) -> None:
    outcome = await read(fake_llm, WHOLE + "data: [DONE]\n\ndata: not json at all\n\n")
    assert_whole_answer(outcome)


async def test_done_before_the_response_completed_is_a_cut_stream(
    fake_llm: FakeLLMServer,
) -> None:
    outcome = await read(fake_llm, OPENING + TEXT_ITEM + "data: [DONE]\n\n" + CALL_ITEM + COMPLETED)
    assert isinstance(outcome.error, StreamError), outcome.error
    assert outcome.error.error_type == "incomplete_stream" and outcome.error.retryable
    assert str(outcome.error) == "the Responses stream ended before the response completed"
    assert outcome.message.text == "Hello"


@pytest.mark.parametrize(
    ("reason", "stop"), [("max_output_tokens", "max_tokens"), ("content_filter", "refusal")]
)
async def test_an_incomplete_response_keeps_what_came(
    fake_llm: FakeLLMServer, reason: str, stop: str
) -> None:
    incomplete = response(
        "incomplete", [MESSAGE], usage=USAGE, incomplete_details={"reason": reason}
    )
    body = OPENING + TEXT_ITEM + frame("response.incomplete", 20, response=incomplete)
    outcome = await read(fake_llm, body)
    assert outcome.error is None, outcome.error
    assert outcome.acc.stop_reason == stop and outcome.message.text == "Hello"


#: (the error object, what drover raises: class, message, type, retryable)
ErrorCase = tuple[dict[str, Any] | None, type[Exception], str, str | None, bool]

FAILED: list[ErrorCase] = [
    ({"code": "server_error", "message": "model crashed"}, StreamError, "model crashed",
     "server_error", True),
    ({"code": "invalid_prompt", "message": "no"}, StreamError, "no", "invalid_prompt", False),
    ({"code": "context_length_exceeded", "message": "too long"}, ContextOverflowError,
     "too long", "context_length_exceeded", False),
    (None, StreamError, "the response failed", "failed", False),
]  # fmt: skip


@pytest.mark.parametrize(("error", "cls", "message", "error_type", "retryable"), FAILED)
async def test_a_failed_response_fails_the_attempt(
    fake_llm: FakeLLMServer,
    error: dict[str, Any] | None,
    cls: type[Exception],
    message: str,
    error_type: str | None,
    retryable: bool,
) -> None:
    failed = frame("response.failed", 20, response=response("failed", [], error=error))
    outcome = await read(fake_llm, OPENING + TEXT_ITEM + failed + SHORT)
    assert type(outcome.error) is cls, outcome.error
    assert isinstance(outcome.error, StreamError | ContextOverflowError)
    assert str(outcome.error) == message and outcome.error.error_type == error_type
    assert outcome.error.retryable is retryable
    assert outcome.message.text == "Hello"


ERROR_EVENTS: list[ErrorCase] = [
    ({"code": "server_error", "message": "boom", "param": None}, StreamError, "boom",
     "server_error", True),
    ({"code": "invalid_request_error", "message": "bad"}, StreamError, "bad",
     "invalid_request_error", False),
    ({"code": None, "message": "odd"}, StreamError, "odd", None, False),
    ({"code": "server_error"}, StreamError, "the stream reported an error", "server_error",
     True),
    ({"code": "context_length_exceeded", "message": "too long", "param": "input"},
     ContextOverflowError, "too long", "context_length_exceeded", False),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "cls", "message", "error_type", "retryable"), ERROR_EVENTS)
async def test_an_error_event_fails_the_attempt(
    fake_llm: FakeLLMServer,
    fields: dict[str, Any],
    cls: type[Exception],
    message: str,
    error_type: str | None,
    retryable: bool,
) -> None:
    """The API's ``error`` event has no ``error`` key: the SDK hands it over as an event,
    and the provider fails the attempt on it."""
    outcome = await read(fake_llm, OPENING + TEXT_ITEM + frame("error", 20, **fields) + SHORT)
    assert type(outcome.error) is cls, outcome.error
    assert isinstance(outcome.error, StreamError | ContextOverflowError)
    assert str(outcome.error) == message and outcome.error.error_type == error_type
    assert outcome.error.retryable is retryable
    assert outcome.message.text == "Hello"


ERROR_KEYS: list[ErrorCase] = [
    ({"type": "server_error", "code": "server_error", "message": "boom"}, StreamError, "boom",
     "server_error", True),
    ({"type": "invalid_request_error", "code": "bad_thing", "message": "bad"}, StreamError,
     "bad", "invalid_request_error", False),
    ({"code": "rate_limit_exceeded", "message": "slow down"}, StreamError, "slow down",
     "rate_limit_exceeded", True),
    ({"type": "invalid_request_error", "code": "context_length_exceeded", "message": "long"},
     ContextOverflowError, "long", "context_length_exceeded", False),
    ({"message": ""}, StreamError, "An error occurred during streaming", None, False),
]  # fmt: skip


@pytest.mark.parametrize("kind", ["error", "response.output_text.delta"])
@pytest.mark.parametrize(("error", "cls", "message", "error_type", "retryable"), ERROR_KEYS)
async def test_a_payload_with_an_error_key_is_raised_as_the_sdk_raises_it(
    fake_llm: FakeLLMServer,
    kind: str,
    error: dict[str, Any],
    cls: type[Exception],
    message: str,
    error_type: str | None,
    retryable: bool,
) -> None:
    """The SDK raises any event whose JSON has an ``error`` (``APIError`` with that object as
    its body), whatever the event's name."""
    body = OPENING + TEXT_ITEM + frame(kind, 20, output_index=1, delta="x", error=error)
    outcome = await read(fake_llm, body + SHORT)
    assert type(outcome.error) is cls, outcome.error
    assert isinstance(outcome.error, StreamError | ContextOverflowError)
    assert str(outcome.error) == message and outcome.error.error_type == error_type
    assert outcome.error.retryable is retryable
    assert outcome.message.text == "Hello"


async def test_a_retryable_error_event_before_any_other_is_retried(
    fake_llm: FakeLLMServer,
) -> None:
    first = frame("error", 0, code="server_error", message="busy") + SHORT
    outcome = await read(fake_llm, first, WHOLE, max_retries=1)
    assert [str(notice.error) for notice in outcome.retries] == ["busy"]
    assert_whole_answer(outcome)


@pytest.mark.parametrize(
    ("event", "detail"),
    [
        ("event: response.output_text.delta\n\n", "Expecting value: line 1 column 1 (char 0)"),
        ("data:\n\n", "Expecting value: line 1 column 1 (char 0)"),
        ('data: {"type": "response.output_text.delta",\n\n', "Expecting property name "
         "enclosed in double quotes: line 1 column 39 (char 38)"),
        ('data: {"type": "x"} trailing\n\n', "Extra data: line 1 column 15 (char 14)"),
    ],
    ids=["named-without-data", "empty-data", "truncated", "trailing"],
)  # fmt: skip
async def test_an_event_without_json_fails_the_attempt(
    fake_llm: FakeLLMServer, event: str, detail: str
) -> None:
    outcome = await read(fake_llm, OPENING + TEXT_ITEM + event + SHORT)
    assert type(outcome.error) is StreamError, outcome.error
    assert str(outcome.error) == f"{API} sent malformed data: {detail}"
    assert outcome.error.error_type == "malformed" and not outcome.error.retryable
    assert outcome.message.text == "Hello"


async def test_keep_alive_comments_are_not_a_stall(fake_llm: FakeLLMServer) -> None:
    """The stall timeout counts bytes: 40 comments 0.04 s apart bring no event for 1.6 s,
    longer than the 1 s stall timeout, and the stream goes on."""
    keep_alive = ": keep-alive\n\n" * 40
    fake_llm.script({"raw_text": OPENING + keep_alive + TEXT_ITEM + SHORT, "delay": 0.04})
    provider = make_provider("openai-responses", fake_llm, max_retries=0, stall_timeout=1.0)
    try:
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    assert outcome.error is None, outcome.error
    assert outcome.message.text == "Hello and more"
