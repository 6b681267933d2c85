"""Replay: the events after a client's id, from the log and the live ring, or a reset.

The log's rows cover ranges of numbers (:class:`~drover.journal.records.EventRecord`): a coalesced
``text_delta`` row holds the text of several live deltas and marks where each ends, so it is
cut back into one event per delta here, and a replay can start after any of them. (A row holds
whole deltas; one an older version wrote may end inside a delta: the text after its last mark
belongs to a delta that ends in a later row of the same block, and is carried into that row's
first piece.) Deltas the journal has not flushed yet come from the feed's ring; a delta whose
text a logged event holds with others' (a row redaction changed) is served there, once.
Each frame's ``prev`` is the number of the event before it in what is served: the log's
order, with the ring's frames (which carry the ``prev`` they were published with) among them.

A client id is *continuable* when it is 0, still in the ring, or the number of a whole event the log
holds — a row's own number, or a delta that ends in a text row (a mark). Anything else — a number
lost with a crashed process (a hole below the numbers recovery used, or, in a log an older version
wrote, the last delta of a flush that held only its start), one ahead of everything that survived,
or one inside a row that redaction made uncuttable — gets a ``reset`` with the durable snapshot:
never a silent skip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drover.journal.records import EventRecord
from drover.runtime.hub import Frame, SessionFeed, make_frame, text_frame, text_template

#: One event of the log before it is encoded: ``(seq, text, template, None)`` for a delta cut
#: from a text row, ``(seq, None, payload, turn_id)`` for any other row.
_Entry = tuple[int, str | None, Any, str | None]


@dataclass(frozen=True, slots=True)
class Backlog:
    """What to send after ``after``; ``reset`` when the id cannot be continued."""

    frames: list[Frame]
    reset: bool


def _cuttable_at(row: EventRecord, seq: int) -> bool:
    if not row.seq <= seq <= row.end_seq:
        return False
    if row.type != "text_delta":
        # (a row of an older journal may cover superseded deltas before its own number: the
        # client saw them, and what the row carries replaces them)
        return True
    # A delta the row holds whole (a row's text after its last mark is the start of a delta
    # that ends in a later row, if any survived).
    return row.marks is not None and any(mark == seq for mark, _ in row.marks)


def continuable(after: int, rows: Sequence[EventRecord], feed: SessionFeed | None) -> bool:
    """Whether the events after ``after`` can be served exactly (``rows``: those covering
    any number from ``after`` on)."""
    if after == 0 or (feed is not None and feed.holds(after)):
        return True
    return any(_cuttable_at(row, after) for row in rows)


def _entries(rows: Sequence[EventRecord]) -> tuple[list[_Entry], list[tuple[int, int]]]:
    """Every event the rows hold, coalesced text rows cut back into their deltas, in number
    order; and the spans ``(first, last)`` of numbers one such event holds the text of (a
    text row without marks, or redacted to another length and marked at its end only). A text
    row without marks (redaction changed its length) is one event under its last number — with
    the start of its last delta, which a next row of its block may go on with: then the two
    are that delta's one event."""
    out: list[_Entry] = []
    spans: list[tuple[int, int]] = []
    carry: dict[tuple[str | None, Any, Any], str] = {}
    opaque: dict[tuple[str | None, Any, Any], tuple[int, str, int]] = {}
    for row in rows:
        payload = row.payload
        if row.type != "text_delta":
            out.append((row.end_seq, None, dict(payload), row.turn_id))
            continue
        index, step = payload.get("index"), payload.get("step")
        key = (row.turn_id, step, index)
        text = str(payload.get("text", ""))
        template = text_template(index, step, row.turn_id)
        held = opaque.pop(key, None)
        if held is not None and held[0] != row.seq:  # (its last delta ended in it)
            out.append((held[0], held[1], template, None))
            spans.append((held[2], held[0]))
            held = None
        if held is None:
            pending, low = carry.pop(key, ""), row.seq
        else:
            _, pending, low = held
        if row.marks is None:
            opaque[key] = (row.end_seq, pending + text, low)
            continue
        start = 0
        for seq, end in row.marks:
            piece, pending, start = pending + text[start:end], "", end
            if piece:
                out.append((seq, piece, template, None))
                if low < seq:
                    spans.append((low, seq))
            low = seq + 1
        if start < len(text):
            carry[key] = pending + text[start:]
    for (turn_id, step, index), (seq, text, low) in opaque.items():
        out.append((seq, text, text_template(index, step, turn_id), None))
        spans.append((low, seq))
    out.sort(key=_first)
    return out, spans


def _first(entry: _Entry) -> int:
    return entry[0]


def _frame(entry: _Entry, prev: int) -> Frame:
    seq, piece, body, turn_id = entry
    if piece is not None:
        return text_frame(seq, piece, body, prev)
    return make_frame(seq, turn_id, body, prev)


def expand(rows: Sequence[EventRecord], after: int) -> list[Frame]:
    """The log's events numbered above ``after`` as frames, coalesced text rows cut back into
    their deltas, in number order; ``prev`` from the order of the rows (``after`` for the
    first when no row holds an event at or below it)."""
    return _merged(_entries(rows)[0], [], after)


def backlog(
    after: int, rows: Sequence[EventRecord], feed: SessionFeed | None, *, snapshot: bool = False
) -> Backlog:
    """The frames after ``after``: the log's, then the ring's numbers the log lacks.
    ``snapshot``: ``after`` is the number of a snapshot the client was just sent, which holds
    everything up to it — served from there whatever the row it falls in."""
    if not snapshot and not continuable(after, rows, feed):
        return Backlog(frames=[], reset=True)
    entries, spans = _entries(rows)
    live = [] if feed is None else feed.after(after)
    if live:
        logged = {entry[0] for entry in entries}
        # (a delta whose text a logged event holds with others': served there, not twice)
        logged.update(
            frame.seq
            for frame in live
            if frame.type == "text_delta" and any(low <= frame.seq <= high for low, high in spans)
        )
        live = [frame for frame in live if frame.seq not in logged]
    return Backlog(frames=_merged(entries, live, after), reset=False)


def _merged(entries: list[_Entry], live: list[Frame], after: int) -> list[Frame]:
    """The log's entries above ``after`` encoded, with the ring's frames among them (both in
    number order); each entry's ``prev`` is the number before it."""
    frames: list[Frame] = []
    prev = after
    i, n = 0, len(entries)
    for frame in live:
        while i < n and entries[i][0] < frame.seq:
            if entries[i][0] > after:
                frames.append(_frame(entries[i], prev))
            prev = entries[i][0]
            i += 1
        frames.append(frame)
        prev = frame.seq
    for entry in entries[i:]:
        if entry[0] > after:
            frames.append(_frame(entry, prev))
        prev = entry[0]
    return frames
