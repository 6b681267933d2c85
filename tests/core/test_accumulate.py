"""The pure stream reducer."""

from __future__ import annotations

from drover.core.accumulate import Accumulator, parse_tool_input
from drover.core.messages import TextBlock, ThinkingBlock, ToolUseBlock, Usage
from drover.core.model_stream import BlockDelta, BlockStart, BlockStop, StreamEnd, UsageUpdate


def _end(reason: str = "end_turn") -> StreamEnd:
    return StreamEnd(stop_reason=reason, usage=Usage(output_tokens=3))  # type: ignore[arg-type]


def test_text_and_tool_blocks_in_index_order_with_gaps() -> None:
    acc = Accumulator()
    events = [
        BlockStart(index=5, kind="tool_use", id="t1", name="read_file"),
        BlockStart(index=0, kind="text"),
        BlockDelta(index=0, kind="text", data="Hel"),
        BlockDelta(index=5, kind="input_json", data=""),
        BlockDelta(index=5, kind="input_json", data='{"pa'),
        BlockDelta(index=0, kind="text", data="lo"),
        BlockDelta(index=5, kind="input_json", data='th": "a.txt"}'),
        BlockStop(index=0),
        BlockStop(index=5),
        _end("tool_use"),
    ]
    for event in events:
        acc.apply(event)
    blocks = acc.blocks()
    assert blocks == [
        TextBlock(text="Hello"),
        ToolUseBlock(id="t1", name="read_file", input={"path": "a.txt"}),
    ]
    assert acc.stop_reason == "tool_use"


def test_empty_tool_input_is_an_empty_object() -> None:
    acc = Accumulator()
    acc.apply(BlockStart(index=0, kind="tool_use", id="t", name="glob"))
    acc.apply(BlockDelta(index=0, kind="input_json", data=""))
    finished = acc.apply(BlockStop(index=0))
    assert finished == ToolUseBlock(id="t", name="glob", input={})


def test_unparseable_tool_input_is_kept_as_an_error() -> None:
    parsed, error = parse_tool_input('{"path": "a')
    assert parsed == {}
    assert error is not None and "not valid JSON" in error
    parsed, error = parse_tool_input("[1, 2]")
    assert error == "tool input must be a JSON object, got list"
    # Nested past the decoder's stack: an error result for the model, not a broken turn.
    parsed, error = parse_tool_input('{"a": ' + "[" * 5000 + "]" * 5000 + "}")
    assert (parsed, error) == ({}, "tool input is nested too deeply to read")


def test_thinking_with_signature() -> None:
    acc = Accumulator()
    acc.apply(BlockStart(index=0, kind="thinking"))
    acc.apply(BlockDelta(index=0, kind="thinking", data="hmm"))
    acc.apply(BlockDelta(index=0, kind="signature", data="sig=="))
    acc.apply(BlockStop(index=0))
    assert acc.blocks() == [ThinkingBlock(thinking="hmm", signature="sig==")]


def test_partial_message_keeps_streaming_text_and_drops_unfinished_calls() -> None:
    acc = Accumulator()
    acc.apply(BlockStart(index=0, kind="thinking"))
    acc.apply(BlockDelta(index=0, kind="thinking", data="unsigned"))
    acc.apply(BlockStop(index=0))
    acc.apply(BlockStart(index=1, kind="text"))
    acc.apply(BlockDelta(index=1, kind="text", data="half an ans"))
    acc.apply(BlockStart(index=2, kind="tool_use", id="t", name="bash"))
    acc.apply(BlockDelta(index=2, kind="input_json", data='{"comm'))
    partial = acc.partial_message()
    assert partial is not None
    assert partial.content == (TextBlock(text="half an ans", partial=True),)
    assert acc.open_tool_calls() == [(2, "t", "bash")]


def test_partial_message_of_nothing_is_none() -> None:
    acc = Accumulator()
    assert acc.partial_message() is None
    assert not acc.has_content
    acc.apply(BlockStart(index=0, kind="text"))
    assert acc.partial_message() is None


def test_usage_keeps_largest_cumulative_values() -> None:
    acc = Accumulator()
    acc.apply(UsageUpdate(usage=Usage(input_tokens=10, output_tokens=1)))
    acc.apply(StreamEnd(stop_reason="end_turn", usage=Usage(output_tokens=7)))
    assert acc.usage == Usage(input_tokens=10, output_tokens=7)


def test_empty_text_blocks_are_not_kept() -> None:
    acc = Accumulator()
    acc.apply(BlockStart(index=0, kind="text"))
    acc.apply(BlockStop(index=0))
    acc.apply(_end())
    assert acc.message().content == ()
