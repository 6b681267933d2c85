"""Event sinks: where the loop's events go.

The loop awaits :meth:`EventSink.send` for every event. Two kinds of sink exist:

* reliable sinks (the journal, a test recorder) see every event, in order;
* :class:`EventChannel`, the live feed of a UI or a network client, is bounded: when its reader
  falls behind, text and thinking deltas are dropped (the text shows again in the finished
  message), but permission requests, tool states and terminal events are always delivered.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any, Protocol

from drover.core.events import Done, Error, Event, Incomplete, PermissionRequest, is_droppable

#: Events never held back from live consumers: a question and a turn's end (nothing may keep
#: them from the user).
_NEVER_HELD = (PermissionRequest, Done, Incomplete, Error)

log = logging.getLogger(__name__)


class EventSink(Protocol):
    async def send(self, event: Event) -> None: ...


class Fanout:
    """Sends each event to reliable sinks, then to live consumers, in the order given.

    A reliable sink (the journal) is part of the turn: what it raises reaches the loop. A live
    consumer (a printer, a UI, a network client) is not: one that raises is detached and logged
    and the turn goes on without it. A permission request that no live consumer is left to
    answer is denied.

    A reliable sink whose ``holds_back`` is true after it took an event has not made it
    durable yet, though it must be before anyone is shown it (the journal's
    ``hold_messages``): the event waits, and reaches the live consumers, in order, with the
    first later event after which no sink holds back.
    """

    def __init__(self, sinks: Iterable[EventSink], *, live: Iterable[EventSink] = ()) -> None:
        self._sinks = tuple(sinks)
        self._live = list(live)
        self._had_live = bool(self._live)
        #: Consumers detached after they raised, with what they raised.
        self.detached: list[tuple[EventSink, Exception]] = []
        # Events taken by the reliable sinks and not yet shown (see holds_back above).
        self._held: list[Event] = []
        # The reliable sinks that can hold an event back: asked after every event whether they
        # hold back the last one they took.
        self._holders: tuple[Any, ...] = tuple(s for s in self._sinks if hasattr(s, "holds_back"))

    async def send(self, event: Event) -> None:
        # An interruption while one sink handles the event still lets every other consumer
        # see it (the loop emitted it), then goes on.
        cancelled: asyncio.CancelledError | None = None
        try:
            for sink in self._sinks:
                await sink.send(event)
        except asyncio.CancelledError as exc:
            cancelled = exc
        if self._live:  # (with none, nothing is shown: there is nothing to hold back either)
            holding = False
            for sink in self._holders:  # (per event: no call, no generator)
                if sink.holds_back:
                    holding = True
                    break
            if holding and not isinstance(event, _NEVER_HELD):
                self._held.append(event)
            elif self._held:
                shown, self._held = self._held, []
                shown.append(event)
                for each in shown:
                    cancelled = await self._show(each) or cancelled
            else:  # (the common case: nothing held; no list for it)
                cancelled = await self._show(event) or cancelled
        if self._had_live and not self._live and isinstance(event, PermissionRequest):
            event.decide("deny")
        if cancelled is not None:
            raise cancelled

    async def _show(self, event: Event) -> asyncio.CancelledError | None:
        """Send ``event`` to every live consumer; the cancellation one of them raised."""
        cancelled: asyncio.CancelledError | None = None
        for consumer in tuple(self._live):
            try:
                await consumer.send(event)
            except asyncio.CancelledError as exc:
                cancelled = cancelled or exc
            except Exception as exc:
                self._live.remove(consumer)
                self.detached.append((consumer, exc))
                log.warning(
                    "detached the consumer %r after it failed on a %s event: %r",
                    consumer,
                    event.type,
                    exc,
                )
        return cancelled


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
