"""Neutral history → Anthropic Messages request."""

from __future__ import annotations

import re
from typing import Any

from drover.core.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.providers.convert_anthropic import (
    OPENING_TEXT,
    to_anthropic_messages,
    to_anthropic_tools,
)
from drover.providers.ids import ANTHROPIC_IDS, fit_id
from drover.testing import validate_anthropic

from .conftest import READ_FILE
from .histories import LONG_ID, ODD_ID, mixed_history

ID_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def body(messages: list[Message]) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": to_anthropic_messages(messages)}


def test_plain_conversation() -> None:
    out = to_anthropic_messages([user_message("hi"), assistant_message([TextBlock(text="yo")])])
    assert out == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "yo"}]},
    ]


def test_mixed_history_converts_to_a_valid_request() -> None:
    out = to_anthropic_messages(mixed_history())
    assert validate_anthropic(body(mixed_history())) == []
    assert [m["role"] for m in out] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    first = list(out[1]["content"])
    assert first[0] == {"type": "thinking", "thinking": "plan", "signature": "sig-1"}
    assert first[1] == {"type": "redacted_thinking", "data": "REDACTED"}
    assert first[3] == {
        "type": "tool_use",
        "id": "toolu_01A",
        "name": "read_file",
        "input": {"path": "a"},
    }
    # Unsigned thinking (Chat reasoning, Responses summaries) cannot go to Anthropic.
    chat_turn = list(out[3]["content"])
    assert [b["type"] for b in chat_turn] == ["tool_use"]
    responses_turn = list(out[5]["content"])
    assert [b["type"] for b in responses_turn] == ["text", "tool_use"]


def test_foreign_ids_are_fitted_and_pairs_stay_matched() -> None:
    out = to_anthropic_messages(mixed_history())
    uses = [b for m in out for b in m["content"] if isinstance(b, dict) and b["type"] == "tool_use"]
    results = [
        b for m in out for b in m["content"] if isinstance(b, dict) and b["type"] == "tool_result"
    ]
    assert all(ID_RE.match(str(b["id"])) for b in uses)
    assert [b["id"] for b in uses] == [b["tool_use_id"] for b in results]
    assert uses[1]["id"] == fit_id(ODD_ID, ANTHROPIC_IDS) != ODD_ID
    assert uses[2]["id"] == fit_id(LONG_ID, ANTHROPIC_IDS) != LONG_ID


def test_error_results_keep_their_flag_and_empty_content_is_left_out() -> None:
    out = to_anthropic_messages(
        [
            user_message("go"),
            assistant_message(
                [
                    ToolUseBlock(id="t1", name="x", input={}),
                    ToolUseBlock(id="t2", name="x", input={}),
                ]
            ),
            tool_result_message(
                [
                    ToolResultBlock(tool_use_id="t1", content="failed", is_error=True),
                    ToolResultBlock(tool_use_id="t2", content=""),
                ]
            ),
        ]
    )
    assert list(out[2]["content"]) == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "failed", "is_error": True},
        {"type": "tool_result", "tool_use_id": "t2"},
    ]


def test_same_role_runs_are_merged_with_results_first() -> None:
    history = [
        user_message("go"),
        assistant_message([TextBlock(text="one")]),
        assistant_message([ToolUseBlock(id="t1", name="x", input={})]),
        user_message("by the way"),
        tool_result_message([ToolResultBlock(tool_use_id="t1", content="r")]),
    ]
    out = to_anthropic_messages(history)
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert [b["type"] for b in out[2]["content"]] == ["tool_result", "text"]
    assert validate_anthropic(body(history)) == []


def test_empty_text_and_unsigned_thinking_are_left_out() -> None:
    history = [
        user_message("go"),
        Message(
            role="assistant",
            content=(
                TextBlock(text="  "),
                ThinkingBlock(thinking="no signature"),
                TextBlock(text="ok"),
            ),
        ),
    ]
    assert list(to_anthropic_messages(history)[1]["content"]) == [{"type": "text", "text": "ok"}]


def test_a_history_opening_with_the_assistant_gets_a_user_message_first() -> None:
    out = to_anthropic_messages(
        [assistant_message([TextBlock(text="summary")]), user_message("go")]
    )
    assert out[0] == {"role": "user", "content": [{"type": "text", "text": OPENING_TEXT}]}


def test_tools() -> None:
    assert to_anthropic_tools([READ_FILE]) == [
        {
            "name": "read_file",
            "description": "Read a file.",
            "input_schema": dict(READ_FILE.input_schema),
        }
    ]
