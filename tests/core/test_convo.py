"""Conversation manager: snapshots, concurrency, token estimate, calibration, compaction."""

from __future__ import annotations

import threading

import pytest

from drover.core.conversation import SUMMARY_SENTINEL, ConversationManager, safe_cut
from drover.core.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant_message,
    tool_result_message,
    user_message,
)


def _exchange(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        out.append(user_message(f"question {i}"))
        out.append(assistant_message([TextBlock(text=f"answer {i}")]))
    return out


def test_append_and_snapshot_round_trip() -> None:
    convo = ConversationManager()
    convo.append(user_message("hi"))
    convo.append(assistant_message([TextBlock(text="hello")]))
    snap = convo.messages()
    assert [m.role for m in snap] == ["user", "assistant"]
    assert snap[1].text == "hello"


def test_snapshot_is_independent_of_later_appends() -> None:
    convo = ConversationManager(messages=_exchange(1))
    snap = convo.messages()
    convo.append(user_message("later"))
    assert len(snap) == 2
    assert len(convo.messages()) == 3


def test_concurrent_appends_and_reads_lose_nothing() -> None:
    convo = ConversationManager()
    barrier = threading.Barrier(4)

    def writer(tag: int) -> None:
        barrier.wait()
        for i in range(500):
            convo.append(user_message(f"{tag}-{i}"))

    def reader() -> None:
        barrier.wait()
        for _ in range(500):
            snap = convo.messages()
            assert all(isinstance(m, Message) for m in snap)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(3)]
    threads.append(threading.Thread(target=reader))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(convo) == 1500


def test_estimate_counts_characters_over_divisor() -> None:
    convo = ConversationManager(system_prompt="x" * 40, chars_per_token=4)
    convo.append(user_message("y" * 400))
    assert convo.estimated_tokens() == 110
    smaller_divisor = ConversationManager(system_prompt="x" * 40, chars_per_token=2)
    smaller_divisor.append(user_message("y" * 400))
    assert smaller_divisor.estimated_tokens() == 220


def test_estimate_counts_unicode_characters_not_bytes() -> None:
    convo = ConversationManager(chars_per_token=1)
    convo.append(user_message("日本語"))
    assert convo.estimated_tokens() == 3


@pytest.mark.parametrize("bad", [0, 0.5, 33])
def test_divisor_out_of_range_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="chars_per_token"):
        ConversationManager(chars_per_token=bad)


def test_calibration_is_an_ema_of_real_over_estimate() -> None:
    convo = ConversationManager()
    assert convo.calibration is None
    convo.record_usage(estimated=100, actual_input_tokens=200)
    assert convo.calibration == pytest.approx(2.0)
    convo.record_usage(estimated=100, actual_input_tokens=100)
    assert convo.calibration == pytest.approx(2.0 + 0.3 * (1.0 - 2.0))
    convo.record_usage(estimated=0, actual_input_tokens=50)  # ignored
    assert convo.calibration == pytest.approx(1.7)


def test_needs_compaction_uses_calibrated_estimate() -> None:
    convo = ConversationManager(context_limit=1000, chars_per_token=4, compaction_ratio=0.8)
    convo.append(user_message("z" * 2800))  # 700 estimated tokens
    assert not convo.needs_compaction()
    convo.record_usage(estimated=700, actual_input_tokens=1400)  # API counts twice as many
    assert convo.needs_compaction()


def test_needs_compaction_counts_extra_messages() -> None:
    convo = ConversationManager(context_limit=100, chars_per_token=1)
    assert not convo.needs_compaction()
    assert convo.needs_compaction([user_message("a" * 90)])


def test_summarise_keeps_tail_and_frames_summary() -> None:
    convo = ConversationManager(messages=_exchange(5))
    assert convo.summarise("they talked", keep_tail=4)
    snap = convo.messages()
    assert len(snap) == 5
    assert snap[0].role == "user"
    assert snap[0].text.startswith(SUMMARY_SENTINEL)
    assert "they talked" in snap[0].text
    assert [m.text for m in snap[1:]] == ["question 3", "answer 3", "question 4", "answer 4"]


def test_summarise_with_tail_longer_than_history_is_a_no_op() -> None:
    convo = ConversationManager(messages=_exchange(2))
    assert not convo.summarise("s", keep_tail=10)
    assert len(convo) == 4


def test_summarise_never_separates_tool_use_from_result() -> None:
    call = ToolUseBlock(id="t1", name="read_file", input={"path": "a"})
    history = [
        user_message("read a"),
        assistant_message([call]),
        tool_result_message([ToolResultBlock(tool_use_id="t1", content="A")]),
        assistant_message([TextBlock(text="done")]),
    ]
    # keep_tail=2 would start the tail at the tool result; the cut moves back to its call.
    assert safe_cut(history, 2) == 1
    convo = ConversationManager(messages=history)
    assert convo.summarise("s", keep_tail=2)
    snap = convo.messages()
    assert snap[1].tool_uses[0].id == "t1"
    assert snap[2].tool_results[0].tool_use_id == "t1"
