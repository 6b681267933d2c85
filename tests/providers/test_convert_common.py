"""normalise_history: the clean-up every request conversion starts with."""

from __future__ import annotations

from drover.core.messages import (
    ContentBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.providers.convert_common import MISSING_RESULT_TEXT, normalise_history


def keep_all(_block: ContentBlock) -> bool:
    return True


def no_thinking(block: ContentBlock) -> bool:
    return not isinstance(block, ThinkingBlock)


def call(tool_id: str) -> ToolUseBlock:
    return ToolUseBlock(id=tool_id, name="read_file", input={"path": tool_id})


def result(tool_id: str, content: str = "ok") -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_id, content=content)


def test_a_valid_history_is_returned_as_is() -> None:
    history = [
        user_message("hi"),
        assistant_message([TextBlock(text="reading"), call("a")]),
        tool_result_message([result("a")]),
        assistant_message([TextBlock(text="done")]),
    ]
    assert normalise_history(history, keep=keep_all) == history
    assert all(
        a is b for a, b in zip(normalise_history(history, keep=keep_all), history, strict=True)
    )


def test_dropped_blocks_can_empty_and_remove_a_message_then_neighbours_merge() -> None:
    history = [
        user_message("one"),
        assistant_message([ThinkingBlock(thinking="hmm")]),
        user_message("two"),
    ]
    out = normalise_history(history, keep=no_thinking)
    assert out == [Message(role="user", content=(TextBlock(text="one"), TextBlock(text="two")))]


def test_merge_can_be_turned_off() -> None:
    history = [user_message("one"), user_message("two")]
    assert len(normalise_history(history, keep=keep_all, merge=False)) == 2


def test_missing_results_are_filled_in_as_errors() -> None:
    history = [
        user_message("go"),
        assistant_message([call("a"), call("b")]),
        tool_result_message([result("b")]),
        user_message("and?"),
    ]
    out = normalise_history(history, keep=keep_all)
    assert out[2].content == (
        ToolResultBlock(tool_use_id="a", content=MISSING_RESULT_TEXT, is_error=True),
        result("b"),
        TextBlock(text="and?"),
    )


def test_a_call_at_the_end_or_before_another_assistant_message_gets_a_result() -> None:
    history = [user_message("go"), assistant_message([call("a")])]
    out = normalise_history(history, keep=keep_all)
    assert [m.role for m in out] == ["user", "assistant", "user"]
    assert out[-1].tool_results[0].is_error

    unmerged = [
        user_message("go"),
        assistant_message([call("a")]),
        assistant_message([TextBlock(text="again")]),
    ]
    out = normalise_history(unmerged, keep=keep_all, merge=False)
    assert [m.role for m in out] == ["user", "assistant", "user", "assistant"]


def test_results_come_first_in_call_order() -> None:
    history = [
        user_message("go"),
        assistant_message([call("a"), call("b")]),
        Message(role="user", content=(TextBlock(text="note"), result("b"), result("a"))),
    ]
    out = normalise_history(history, keep=keep_all)
    assert out[2].content == (result("a"), result("b"), TextBlock(text="note"))


def test_orphan_and_repeated_results_do_not_break_the_pairing() -> None:
    history = [
        user_message("go"),
        assistant_message([call("a")]),
        tool_result_message([result("a"), result("a", "again"), result("zzz", "lost")]),
    ]
    out = normalise_history(history, keep=keep_all)
    assert out[2].content == (
        result("a"),
        TextBlock(text="[tool result for call zzz]\nlost"),
    )
