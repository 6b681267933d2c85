"""The history rules, one small test each, and a violating request answered with a real 400."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from drover.testing import FakeLLMServer, validate_anthropic, validate_chat, validate_responses

from .conftest import USER, Collect


def user(*content: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


def assistant(*content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(tool_id: str, tool_input: Any = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "t", "input": tool_input or {}}


def tool_result(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}


def anthropic_problems(*messages: dict[str, Any]) -> list[str]:
    return validate_anthropic({"model": "m", "max_tokens": 5, "messages": list(messages)})


# --- Anthropic ---------------------------------------------------------------------------------


def test_anthropic_valid_tool_round_trip() -> None:
    assert (
        anthropic_problems(
            user(text("go")),
            assistant(text("ok"), tool_use("a"), tool_use("b")),
            user(tool_result("a"), tool_result("b"), text("more")),
            assistant(text("done")),
        )
        == []
    )


def test_anthropic_messages_must_not_be_empty() -> None:
    assert anthropic_problems() == ["messages: at least one message is required"]


def test_anthropic_first_message_is_user() -> None:
    assert anthropic_problems(assistant(text("hi"))) == [
        'messages: first message must use the "user" role'
    ]


def test_anthropic_roles_are_user_or_assistant() -> None:
    problems = anthropic_problems(user(text("a")), {"role": "system", "content": "x"})
    assert problems == ["messages.1.role: Input should be 'user' or 'assistant'"]


def test_anthropic_tool_use_needs_result_in_next_message() -> None:
    problems = anthropic_problems(user(text("go")), assistant(tool_use("a")), user(text("?")))
    assert len(problems) == 1
    assert problems[0].startswith(
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: a."
    )


def test_anthropic_tool_use_at_the_end_is_unanswered() -> None:
    problems = anthropic_problems(user(text("go")), assistant(tool_use("a")))
    assert "without `tool_result`" in problems[0]


def test_anthropic_tool_results_come_first() -> None:
    problems = anthropic_problems(
        user(text("go")), assistant(tool_use("a")), user(text("first"), tool_result("a"))
    )
    assert len(problems) == 1
    assert "immediately after: a" in problems[0]


def test_anthropic_tool_result_needs_tool_use_in_previous_message() -> None:
    problems = anthropic_problems(user(text("go")), assistant(text("hi")), user(tool_result("z")))
    assert problems == [
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: z. Each "
        "`tool_result` block must have a corresponding `tool_use` block in the previous message."
    ]


def test_anthropic_text_blocks_are_non_empty() -> None:
    assert anthropic_problems(user(text(""))) == [
        "messages.0.content.0.text: text content blocks must be non-empty"
    ]
    assert "non-whitespace" in anthropic_problems(user(text("  ")))[0]


def test_anthropic_tool_use_ids_are_unique() -> None:
    problems = anthropic_problems(
        user(text("go")),
        assistant(tool_use("a")),
        user(tool_result("a")),
        assistant(tool_use("a")),
        user(tool_result("a")),
    )
    assert problems == ["messages.3.content.0: `tool_use` ids must be unique: a"]


def test_anthropic_tool_use_input_is_an_object() -> None:
    problems = anthropic_problems(
        user(text("go")),
        assistant({"type": "tool_use", "id": "a", "name": "t", "input": "x"}),
        user(tool_result("a")),
    )
    assert problems == ["messages.1.content.0.tool_use.input: Input should be a valid dictionary"]


def test_anthropic_thinking_needs_signature() -> None:
    problems = anthropic_problems(
        user(text("go")), assistant({"type": "thinking", "thinking": "hm"}, text("ok"))
    )
    assert problems == ["messages.1.content.0.thinking.signature: Field required"]


def test_anthropic_empty_content_only_allowed_for_final_assistant() -> None:
    assert anthropic_problems(user(text("go")), {"role": "assistant", "content": ""}) == []
    assert "non-empty content" in anthropic_problems({"role": "user", "content": ""})[0]


# --- Chat Completions --------------------------------------------------------------------------


def call(call_id: str, arguments: Any = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "t", "arguments": arguments}}


def chat_problems(*messages: dict[str, Any]) -> list[str]:
    return validate_chat({"model": "m", "messages": [{"role": "user", "content": "go"}, *messages]})


def tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def test_chat_valid_parallel_calls() -> None:
    assert (
        chat_problems(
            {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
            tool("b"),
            tool("a"),
            {"role": "assistant", "content": "done"},
        )
        == []
    )


def test_chat_calls_need_one_tool_message_each_before_anything_else() -> None:
    problems = chat_problems(
        {"role": "assistant", "tool_calls": [call("a"), call("b")]},
        tool("a"),
        {"role": "user", "content": "hm"},
        tool("b"),
    )
    assert problems[0] == (
        "messages[1]: An assistant message with 'tool_calls' must be followed by tool messages "
        "responding to each 'tool_call_id'. The following tool_call_ids did not have response "
        "messages: b"
    )
    assert "must be a response to a preceeding message" in problems[1]


def test_chat_tool_message_needs_a_preceding_call() -> None:
    assert chat_problems(tool("z")) == [
        "messages[1]: Invalid parameter: messages with role 'tool' must be a response to a "
        "preceeding message with 'tool_calls'."
    ]


def test_chat_call_ids_are_unique() -> None:
    problems = chat_problems(
        {"role": "assistant", "tool_calls": [call("a")]},
        tool("a"),
        {"role": "assistant", "tool_calls": [call("a")]},
        tool("a"),
    )
    assert problems == [
        "messages[3].tool_calls[0]: Duplicate value for 'tool_call_id' of a in 'messages'."
    ]


def test_chat_arguments_are_strings() -> None:
    problems = chat_problems({"role": "assistant", "tool_calls": [call("a", {"x": 1})]}, tool("a"))
    assert problems == [
        "Invalid type for 'messages[1].tool_calls[0].function.arguments': expected a string, "
        "but got an object instead."
    ]


# --- Responses ---------------------------------------------------------------------------------


def fc(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "t", "arguments": "{}"}


def fco(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def test_responses_valid_pairs() -> None:
    items = [{"role": "user", "content": "go"}, fc("a"), fc("b"), fco("b"), fco("a")]
    assert validate_responses({}, items) == []


def test_responses_call_needs_output() -> None:
    assert validate_responses({}, [fc("a")]) == ["No tool output found for function call a."]


def test_responses_output_needs_call() -> None:
    assert validate_responses({}, [fco("z")]) == [
        "No tool call found for function call output with call_id z."
    ]


def test_responses_call_ids_are_unique() -> None:
    problems = validate_responses({}, [fc("a"), fco("a"), fc("a"), fco("a")])
    assert problems[0] == "Duplicate value for 'call_id' of a in 'input'."


# --- through the server --------------------------------------------------------------------------


async def test_violation_is_refused_with_the_apis_400_and_recorded(
    fake_llm: FakeLLMServer, protocol: str, collect: Collect
) -> None:
    fake_llm.allow_violations = True
    fake_llm.script({"text": "never sent"})
    if protocol == "anthropic":
        bad: dict[str, Any] = {"messages": [*USER, assistant(tool_use("a"))]}
    elif protocol == "openai-chat":
        bad = {"messages": [*USER, {"role": "assistant", "tool_calls": [call("a")]}]}
    else:
        bad = {"input": [{"role": "user", "content": "hi"}, fc("a")]}
    error_class = anthropic.BadRequestError if protocol == "anthropic" else openai.BadRequestError
    with pytest.raises(error_class) as caught:
        await collect(**bad)
    body: Any = caught.value.body
    if protocol == "anthropic":
        assert body["type"] == "error"
        assert body["error"]["type"] == "invalid_request_error"
        assert "without `tool_result`" in body["error"]["message"]
    else:
        assert body["type"] == "invalid_request_error"
        assert body["param"] in (None, "input")
    assert len(fake_llm.violations) == 1
    assert fake_llm.violations[0].startswith(protocol)
    assert fake_llm.remaining == 1  # a refused request consumes no scripted response
