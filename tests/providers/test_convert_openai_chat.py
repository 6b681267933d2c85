"""Neutral history → OpenAI Chat Completions request."""

from __future__ import annotations

import json

import pytest

from drover.core.messages import (
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.providers.convert_openai_chat import arguments_json, to_chat_messages, to_chat_tools
from drover.providers.ids import CHAT_IDS, fit_id
from drover.testing import validate_chat

from .conftest import READ_FILE
from .histories import LONG_ID, ODD_ID, mixed_history


def test_system_first_then_the_conversation() -> None:
    out = to_chat_messages(
        "Be brief.", [user_message("hi"), assistant_message([TextBlock(text="yo")])]
    )
    assert out == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
    ]


def test_no_system_message_when_there_is_no_prompt() -> None:
    assert to_chat_messages("", [user_message("hi")]) == [{"role": "user", "content": "hi"}]


def test_tool_calls_and_results() -> None:
    history = [
        user_message("go"),
        assistant_message(
            [
                ToolUseBlock(id="call_1", name="read_file", input={"path": "ä"}),
                ToolUseBlock(id="call_2", name="glob", input={}),
            ]
        ),
        tool_result_message(
            [
                ToolResultBlock(tool_use_id="call_2", content="x.txt"),
                ToolResultBlock(tool_use_id="call_1", content="denied", is_error=True),
            ]
        ),
        user_message("next"),
    ]
    out = to_chat_messages("", history)
    assert out[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "ä"}'},
            },
            {"id": "call_2", "type": "function", "function": {"name": "glob", "arguments": "{}"}},
        ],
    }
    assert out[2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "Error: denied"},
        {"role": "tool", "tool_call_id": "call_2", "content": "x.txt"},
        {"role": "user", "content": "next"},
    ]


def test_error_results_that_already_say_so_are_not_prefixed_twice() -> None:
    history = [
        user_message("go"),
        assistant_message([ToolUseBlock(id="c", name="x", input={})]),
        tool_result_message([ToolResultBlock(tool_use_id="c", content="Error: no", is_error=True)]),
    ]
    assert to_chat_messages("", history)[-1]["content"] == "Error: no"


def test_mixed_history_is_valid_without_thinking_and_with_short_ids() -> None:
    out = to_chat_messages("sys", mixed_history())
    assert validate_chat({"messages": out}) == []
    dumped = json.dumps(out)
    assert "plan" not in dumped and "chat reasoning" not in dumped and "REDACTED" not in dumped
    calls = [c for m in out if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert [c["id"] for c in calls] == [
        "toolu_01A",
        ODD_ID,
        fit_id(LONG_ID, CHAT_IDS),
    ]
    assert all(len(c["id"]) <= 40 for c in calls)
    tool_ids = [m["tool_call_id"] for m in out if m["role"] == "tool"]
    assert tool_ids == [c["id"] for c in calls]
    assert out[-1] == {"role": "user", "content": "thanks; now summarise"}
    text_turn = next(m for m in out if m["role"] == "assistant" and m.get("content"))
    assert text_turn["content"] == "Reading a."


def test_tools() -> None:
    assert to_chat_tools([READ_FILE]) == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file.",
                "parameters": dict(READ_FILE.input_schema),
            },
        }
    ]


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"path": "é/ß", "opts": [1, None, True, 2.5, -0.0, 1e16], "n": {"deep": {"x": "\u2028"}}},
        {"q": 'a "quoted" \\ back\nslash\x00', "日本": "語", "big": 10**30},
    ],
)
def test_arguments_are_the_json_dumps_of_the_input(arguments: dict[str, object]) -> None:
    block = ToolUseBlock(id="c", name="t", input=arguments)
    assert arguments_json(block) == json.dumps(arguments, ensure_ascii=False)
