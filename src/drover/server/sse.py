"""The event stream of one session as Server-Sent Events (``GET /v1/sessions/{id}/events``).

A :class:`~drover.server.follow.Follower` serves the events without a gap — subscribed first,
then the backlog after the client's id, then what came meanwhile — and this module writes them:
each numbered event with its ``id:`` and ``event:`` lines, a ``reset`` with the durable
snapshot where the client's id cannot be continued, transient events without an id, and a
heartbeat comment when nothing came for a while.

Written as a plain streaming response body (an async generator): the turn runs elsewhere, so
a disconnect, which cancels the generator, only unsubscribes.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from drover.journal.records import SessionRecord
from drover.server.follow import Batch, Follower, Reset
from drover.server.service import Service

HEARTBEAT = b": ping\n\n"
#: Reconnection delay the browser's EventSource should use, in milliseconds.
RETRY_MS = 1000


def _frame(event: str, data: dict[str, Any], seq: int | None = None) -> bytes:
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    head = b"" if seq is None else b"id: %d\n" % seq
    return head + b"event: %s\ndata: %s\n\n" % (event.encode(), body)


def _encode(batch: Batch) -> bytes:
    return b"".join(
        _frame("reset", item.snapshot, item.seq) if isinstance(item, Reset) else item.wire
        for item in batch
    )


async def event_stream(
    service: Service, record: SessionRecord, after: int, *, heartbeat: float
) -> AsyncIterator[bytes]:
    follower = Follower(service, record)
    try:
        await follower.open()
        status = {
            "type": "status",
            "transient": True,
            "running_turn_id": await service.any_running_turn_id(record.id),
            "last_event_id": max(
                follower.feed.last_seq, await service.store.last_event_seq(record.id)
            ),
        }
        yield b"retry: %d\n\n" % RETRY_MS + _frame("status", status)
        began = time.perf_counter()
        chunk = _encode(await follower.catch_up(after))
        if service.metrics is not None:
            service.metrics.replay.observe(time.perf_counter() - began)
        if chunk:
            yield chunk
        while True:
            batch = await follower.next(heartbeat)
            if batch is None:
                break
            yield _encode(batch) if batch else HEARTBEAT
    finally:
        follower.close()
