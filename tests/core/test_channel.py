"""Event channel drop policy and fan-out."""

from __future__ import annotations

import asyncio

from drover.core.events import Done, TextDelta, ToolStateChanged
from drover.core.messages import Usage
from drover.core.sinks import EventChannel, EventRecorder, Fanout


async def test_full_channel_drops_deltas_but_never_terminal_or_tool_events() -> None:
    channel = EventChannel(maxsize=2)
    for i in range(5):
        await channel.send(TextDelta(text=str(i)))
    await channel.send(ToolStateChanged(call_id="c", call_index=0, name="x", state="running"))
    await channel.send(Done(text="", usage=Usage()))
    channel.close()
    received = [event async for event in channel]
    assert [type(e).__name__ for e in received] == [
        "TextDelta",
        "TextDelta",
        "ToolStateChanged",
        "Done",
    ]
    assert channel.dropped == 3


async def test_reader_waits_for_events_until_closed() -> None:
    channel = EventChannel()
    got: list[str] = []
    arrived = asyncio.Event()

    async def read() -> None:
        async for event in channel:
            assert isinstance(event, TextDelta)
            got.append(event.text)
            arrived.set()

    reader = asyncio.create_task(read())
    # One pass of the loop: the reader drains the empty channel and parks on its wake-up.
    await asyncio.sleep(0)
    assert not reader.done()
    for text in ("a", "b"):
        arrived.clear()
        channel.put_nowait(TextDelta(text=text))
        # Still open: only the put itself can wake the parked reader.
        await asyncio.wait_for(arrived.wait(), timeout=5)
        assert got[-1] == text
    assert not reader.done()
    channel.close()
    await asyncio.wait_for(reader, timeout=5)
    assert got == ["a", "b"]


async def test_close_wakes_a_waiting_reader_and_later_sends_are_ignored() -> None:
    channel = EventChannel()

    async def first() -> object:
        async for event in channel:
            return event
        return None

    reader = asyncio.create_task(first())
    await asyncio.sleep(0)
    assert not reader.done()
    channel.close()
    assert await asyncio.wait_for(reader, timeout=5) is None
    await channel.send(TextDelta(text="late"))
    assert len(channel) == 0


async def test_fanout_sends_in_order_to_every_sink() -> None:
    a, b = EventRecorder(), EventRecorder()
    fan = Fanout([a, b])
    await fan.send(TextDelta(text="x"))
    assert a.events == b.events == [TextDelta(text="x")]
