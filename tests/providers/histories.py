"""Histories shared by conversion and cross-provider tests."""

from __future__ import annotations

from drover.core.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    tool_result_message,
    user_message,
)

LONG_ID = "call_" + "x" * 60  # 65 characters: too long for every API
ODD_ID = "functions.read_file:0"  # the shape some vLLM tool parsers produce

REASONING_ITEM = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "sum"}],
    "encrypted_content": "ENC",
}


def mixed_history() -> list[Message]:
    """One task done by three providers in turn, each leaving its own detail behind."""
    return [
        user_message("read the files"),
        Message(
            role="assistant",
            content=(
                ThinkingBlock(thinking="plan", signature="sig-1"),
                ThinkingBlock(thinking="", redacted_data="REDACTED"),
                TextBlock(text="Reading a."),
                ToolUseBlock(id="toolu_01A", name="read_file", input={"path": "a"}),
            ),
            meta={"provider": "anthropic", "message_id": "msg_01"},
        ),
        tool_result_message([ToolResultBlock(tool_use_id="toolu_01A", content="AAA")]),
        Message(
            role="assistant",
            content=(
                ThinkingBlock(thinking="chat reasoning"),
                ToolUseBlock(id=ODD_ID, name="read_file", input={"path": "b"}),
            ),
            meta={"provider": "openai"},
        ),
        tool_result_message(
            [ToolResultBlock(tool_use_id=ODD_ID, content="no such file", is_error=True)]
        ),
        Message(
            role="assistant",
            content=(
                ThinkingBlock(
                    thinking="sum", meta={"provider": "openai-responses", "item": REASONING_ITEM}
                ),
                TextBlock(
                    text="Reading c.", meta={"provider": "openai-responses", "item_id": "msg_1"}
                ),
                ToolUseBlock(
                    id=LONG_ID,
                    name="read_file",
                    input={"path": "c"},
                    meta={"provider": "openai-responses", "item_id": "fc_1"},
                ),
            ),
            meta={"provider": "openai-responses", "response_id": "resp_1"},
        ),
        tool_result_message([ToolResultBlock(tool_use_id=LONG_ID, content="CCC")]),
        user_message("thanks; now summarise"),
    ]
