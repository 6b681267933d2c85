"""Event sinks: where the loop's events go.

The loop awaits :meth:`EventSink.send` for every event. Two kinds of sink exist:

* reliable sinks (the journal, a test recorder) see every event, in order;
* :class:`EventChannel`, the live feed of a UI or a network client, is bounded: when its reader
  falls behind, text and thinking deltas are dropped (the text shows again in the finished
  message), but permission requests, tool states and terminal events are always delivered.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Protocol

from drover.events import Event, is_droppable


class EventSink(Protocol):
    async def send(self, event: Event) -> None: ...


class Fanout:
    """Sends each event to several sinks, in the order given."""

    def __init__(self, sinks: Iterable[EventSink]) -> None:
        self._sinks = tuple(sinks)

    async def send(self, event: Event) -> None:
        for sink in self._sinks:
            await sink.send(event)


class EventRecorder:
    """Keeps every event in a list (tests and library callers)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def send(self, event: Event) -> None:
        self.events.append(event)


class EventChannel:
    """A bounded live feed; iterate it with ``async for`` until :meth:`close`."""

    def __init__(self, maxsize: int = 512) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be positive")
        self._maxsize = maxsize
        self._items: deque[Event] = deque()
        self._ready = asyncio.Event()
        self._closed = False
        self.dropped = 0

    async def send(self, event: Event) -> None:
        self.put_nowait(event)

    def put_nowait(self, event: Event) -> None:
        if self._closed:
            return
        if len(self._items) >= self._maxsize and is_droppable(event):
            self.dropped += 1
            return
        self._items.append(event)
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def __len__(self) -> int:
        return len(self._items)

    async def __aiter__(self) -> AsyncIterator[Event]:
        while True:
            while self._items:
                yield self._items.popleft()
            if self._closed:
                return
            self._ready.clear()
            await self._ready.wait()
