"""The event stream of one session: subscribe, catch up, then follow — without a gap.

The order is what makes it gap-free: the client is subscribed to the live feed *first*, then
served the backlog after its id (the log, cut back into deltas, plus the ring's unflushed
deltas), then the frames queued meanwhile, skipping every number already sent. A client whose
id cannot be continued gets a ``reset`` carrying the durable snapshot and goes on from the
snapshot's number. A subscriber that falls behind is caught up the same way from its last id.

Written as a plain streaming response body (an async generator): the turn runs elsewhere, so
a disconnect, which cancels the generator, only unsubscribes.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from drover.server.hub import Frame, SessionFeed, Subscription, TransientFrame
from drover.server.replay import backlog
from drover.server.service import Service
from drover.store.base import SessionRecord

HEARTBEAT = b": ping\n\n"
#: Reconnection delay the browser's EventSource should use, in milliseconds.
RETRY_MS = 1000


def _frame(event: str, data: dict[str, Any], seq: int | None = None) -> bytes:
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    head = b"" if seq is None else b"id: %d\n" % seq
    return head + b"event: %s\ndata: %s\n\n" % (event.encode(), body)


class _Stream:
    def __init__(self, service: Service, record: SessionRecord, feed: SessionFeed) -> None:
        self.service = service
        self.record = record
        self.feed = feed
        self.last = 0

    async def catch_up(self, after: int) -> bytes:
        """Everything after ``after`` (or a reset and what follows the snapshot)."""
        store = self.service.store
        out: list[bytes] = []
        for reset in (False, True):
            rows = await store.events_after(self.record.id, max(after - 1, 0))
            # After a reset the client holds the snapshot: everything up to its number, the
            # start of a delta still being written included.
            plan = backlog(after, rows, self.feed, snapshot=reset)
            if not plan.reset:
                for frame in plan.frames:
                    if frame.seq > self.last:
                        out.append(frame.encode())
                        self.last = frame.seq
                self.last = max(self.last, after)
                return b"".join(out)
            snap = await self.service.snapshot(self.record)
            after = self.last = snap["last_event_id"]
            out.append(_frame("reset", snap, after))
        return b"".join(out)

    def follow(self, subscription: Subscription, frames: list[Frame | TransientFrame]) -> bytes:
        out = []
        for frame in frames:
            if isinstance(frame, TransientFrame):
                out.append(frame.wire)
            elif frame.seq > self.last:
                out.append(frame.encode())
                self.last = frame.seq
        return b"".join(out)


async def event_stream(
    service: Service, record: SessionRecord, after: int, *, heartbeat: float
) -> AsyncIterator[bytes]:
    feed = service.hub.feed(record.id)
    subscription = feed.subscribe()
    stream = _Stream(service, record, feed)
    relay = service.relay
    try:
        if relay is not None:
            # Other processes' recent live events into the ring before the backlog is read.
            await relay.attach(record.id)
        status = {
            "type": "status",
            "transient": True,
            "running_turn_id": await service.any_running_turn_id(record.id),
            "last_event_id": max(feed.last_seq, await service.store.last_event_seq(record.id)),
        }
        yield b"retry: %d\n\n" % RETRY_MS + _frame("status", status)
        began = time.perf_counter()
        chunk = await stream.catch_up(after)
        if service.metrics is not None:
            service.metrics.replay.observe(time.perf_counter() - began)
        if chunk:
            yield chunk
        while not subscription.closed:
            if subscription.lagged:
                subscription.resynced()
                chunk = await stream.catch_up(stream.last)
                if chunk:
                    yield chunk
                continue
            frames = await subscription.wait(heartbeat)
            if not frames and not subscription.lagged:
                if not subscription.closed:
                    yield HEARTBEAT
                continue
            chunk = stream.follow(subscription, frames)
            if chunk:
                yield chunk
    finally:
        if relay is not None:
            relay.detach(record.id)
        feed.unsubscribe(subscription)
        if service.running_turn_id(record.id) is None:
            service.hub.forget_idle(record.id)
