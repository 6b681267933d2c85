"""Replay: the events after a client's id, from the log and the live ring, or a reset.

The log's rows cover ranges of numbers (:class:`~drover.store.base.EventRecord`): a coalesced
``text_delta`` row holds the text of several live deltas and marks where each ends, so it is
cut back into one event per delta here, and a replay can start after any of them. Text after a
row's last mark belongs to a delta that ends in a later row of the same block; it is carried
into that row's first piece. Deltas the journal has not flushed yet come from the feed's ring.

A client id is *continuable* when it is 0, still in the ring, or covered by a row that can be
cut there. Anything else — a number lost with a crashed process (a hole below the numbers
recovery used), one ahead of everything that survived, or one inside a row that redaction made
uncuttable — gets a ``reset`` with the durable snapshot: never a silent skip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drover.server.hub import Frame, SessionFeed, make_frame, text_frame, text_template
from drover.store.base import EventRecord


@dataclass(frozen=True, slots=True)
class Backlog:
    """What to send after ``after``; ``reset`` when the id cannot be continued."""

    frames: list[Frame]
    reset: bool


def _cuttable_at(row: EventRecord, seq: int) -> bool:
    if not row.seq <= seq <= row.end_seq:
        return False
    if seq == row.end_seq or row.type != "text_delta":
        return True
    return row.marks is not None and any(mark == seq for mark, _ in row.marks)


def continuable(after: int, rows: Sequence[EventRecord], feed: SessionFeed | None) -> bool:
    """Whether the events after ``after`` can be served exactly (``rows``: those covering
    any number from ``after`` on)."""
    if after == 0 or (feed is not None and feed.holds(after)):
        return True
    return any(_cuttable_at(row, after) for row in rows)


def expand(rows: Sequence[EventRecord], after: int) -> list[Frame]:
    """The log's events numbered above ``after`` as frames, coalesced text rows cut back into
    their deltas, in number order."""
    out: list[Frame] = []
    carry: dict[tuple[str | None, Any, Any], str] = {}
    for row in rows:
        payload = row.payload
        if row.type != "text_delta" or row.marks is None:
            if row.end_seq > after:
                out.append(make_frame(row.end_seq, row.turn_id, dict(payload)))
            continue
        index, step = payload.get("index"), payload.get("step")
        key = (row.turn_id, step, index)
        text = str(payload.get("text", ""))
        template = text_template(index, step, row.turn_id)
        pending, start = carry.pop(key, ""), 0
        for seq, end in row.marks:
            piece, pending, start = pending + text[start:end], "", end
            if seq > after and piece:
                out.append(text_frame(seq, piece, template))
        if start < len(text):
            carry[key] = pending + text[start:]
    out.sort(key=_by_seq)
    return out


def _by_seq(frame: Frame) -> int:
    return frame.seq


def backlog(after: int, rows: Sequence[EventRecord], feed: SessionFeed | None) -> Backlog:
    """The frames after ``after``: the log's, then the ring's numbers the log lacks."""
    if not continuable(after, rows, feed):
        return Backlog(frames=[], reset=True)
    frames = expand(rows, after)
    if feed is not None:
        logged = {frame.seq for frame in frames}
        live = [frame for frame in feed.after(after) if frame.seq not in logged]
        if live:
            frames = sorted([*frames, *live], key=_by_seq)
    return Backlog(frames=frames, reset=False)
