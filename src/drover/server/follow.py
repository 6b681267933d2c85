"""Following one session's numbered events without a gap: subscribe, catch up, then follow.

The order is what makes it gap-free: the reader is subscribed to the live feed *first*, then
served the backlog after its position (the log, cut back into deltas, plus the ring's unflushed
deltas), then the frames queued meanwhile, skipping every number already served. A position
that cannot be continued gets a :class:`Reset` carrying the durable snapshot, and the reader
goes on from the snapshot's number. A subscriber that falls behind is caught up the same way
from its last number.

Every reader of a session's events goes through a :class:`Follower`: the SSE route
(:mod:`.sse`) and the front doors of other protocols (:mod:`.ai_sdk_routes`,
:mod:`.responses_routes`), which translate the same events, so what each protocol serves live
and in a replay comes from one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from drover.journal.records import SessionRecord
from drover.runtime.hub import Frame, Subscription, TransientFrame
from drover.server.replay import backlog
from drover.server.service import Service


@dataclass(frozen=True, slots=True)
class Reset:
    """The reader's position could not be continued: this snapshot replaces what it holds,
    current to ``seq``."""

    snapshot: dict[str, Any]
    seq: int


#: What a follower serves: numbered frames, transient frames and resets, in order.
Batch = list[Frame | TransientFrame | Reset]


def frame_event(frame: Frame) -> dict[str, Any]:
    """The event a numbered frame carries: its JSON data (with ``seq``, ``prev``,
    ``turn_id``), read back from the bytes every client is sent."""
    wire = frame.wire
    start = wire.index(b"\ndata: ") + len(b"\ndata: ")
    data: dict[str, Any] = json.loads(wire[start:])
    return data


class Follower:
    """One reader's position in a session's events. :meth:`open` subscribes it to the live
    feed (and, with several processes, attaches the relay); :meth:`catch_up` alone serves the
    backlog without following (a poll)."""

    def __init__(self, service: Service, record: SessionRecord) -> None:
        self.service = service
        self.record = record
        self.feed = service.hub.feed(record.id)
        self.subscription: Subscription | None = None
        self.last = 0
        self._attached = False

    async def open(self) -> None:
        self.subscription = self.feed.subscribe()
        relay = self.service.relay
        if relay is not None:
            # Other processes' recent live events into the ring before the backlog is read.
            self._attached = True
            await relay.attach(self.record.id)

    def close(self) -> None:
        relay = self.service.relay
        if self._attached and relay is not None:
            relay.detach(self.record.id)
            self._attached = False
        if self.subscription is not None:
            self.feed.unsubscribe(self.subscription)
            self.subscription = None
        if self.service.running_turn_id(self.record.id) is None:
            self.service.hub.forget_idle(self.record.id)

    async def catch_up(self, after: int, *, exact: bool = True) -> Batch:
        """Everything after ``after`` (or a reset and what follows the snapshot). Not
        ``exact``: ``after`` is a point the reader chose to start from, not one it holds —
        served from there whatever the row it falls in, never reset."""
        store = self.service.store
        out: Batch = []
        for reset in (False, True):
            rows = await store.events_after(self.record.id, max(after - 1, 0))
            # After a reset the reader holds the snapshot: everything up to its number.
            plan = backlog(after, rows, self.feed, snapshot=reset or not exact)
            if not plan.reset:
                for frame in plan.frames:
                    if frame.seq > self.last:
                        out.append(frame)
                        self.last = frame.seq
                self.last = max(self.last, after)
                return out
            snap = await self.service.snapshot(self.record)
            after = self.last = snap["last_event_id"]
            out.append(Reset(snap, after))
        return out

    async def next(self, patience: float) -> Batch | None:
        """The next frames: live ones not served yet, or a catch-up after falling behind;
        an empty batch when none came for ``patience`` seconds; None once the stream is
        closed (the server stops, the session is deleted)."""
        subscription = self.subscription
        assert subscription is not None, "open() the follower first"
        while not subscription.closed:
            if subscription.lagged:
                subscription.resynced()
                batch = await self.catch_up(self.last)
                if batch:
                    return batch
                continue
            frames = await subscription.wait(patience)
            if not frames and not subscription.lagged:
                return None if subscription.closed else []
            out: Batch = []
            for frame in frames:
                if isinstance(frame, TransientFrame):
                    out.append(frame)
                elif frame.seq > self.last:
                    out.append(frame)
                    self.last = frame.seq
            if out:
                return out
        return None
