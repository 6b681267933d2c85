"""Sequence numbers of a session's events while one journal is the log's only writer.

A journal holds its turn's lease, so it alone appends to the session's event log. It numbers
every event as it emits it — each live text delta too — and hands the numbered event to an
observer (the server's hub) at once, before the event is written; the log rows then carry
those numbers. A coalesced text row covers the numbers of the deltas it holds and records
where each ends (:class:`StreamMarks`), so a replay can start inside it.

Numbers are handed out and published in increasing order, whatever the number of tasks
sending events at once (parallel tool calls, workers): a number is assigned only once nothing
more is awaited before it is published, so two events can never be published out of order.
Each published event also carries ``prev``, the number of the event before it in the log: the
number before it within a turn, and for a turn's first event the last number the log held
when the turn began (numbers lost with a crashed process lie between).

Numbers are reserved durably in blocks (:meth:`EventLog.reserve_seqs`) before one is handed out
past the reservation; one reservation is made at a time, and every task that needs it waits
for that one. Only the process that holds the turn can reserve (the store checks its owner: a
process that lost its lease fails with :class:`~drover.errors.LeaseLostError` instead of
moving the numbering of the process that took over), and a reservation only grows; the turn's
end shrinks it to the numbers used, in the same transaction. A process that dies loses the
numbers it handed out but never wrote; the events recovery then logs are numbered after the
reservation, so a client holding a lost number finds it in a hole of the log and is told to
reset instead of silently skipping.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_right
from collections.abc import Callable, Iterable
from itertools import accumulate, islice, repeat
from operator import sub
from typing import Any

from drover.errors import LeaseLostError
from drover.journal.protocol import EventLog

log = logging.getLogger(__name__)

#: ``(seq, turn_id, payload, prev)`` of each event as the journal numbers it; ``prev`` is the
#: number of the event before it in the log.
Publish = Callable[[int, str | None, dict[str, Any], int], None]

RESERVE_BLOCK = 1024


def _seen(future: asyncio.Future[None]) -> None:
    """Mark a preparation's outcome as seen (every task that waited for it may be gone)."""
    if not future.cancelled():
        future.exception()


class Numbering:
    """Hands out a session's next sequence numbers, reserving them in blocks."""

    def __init__(
        self,
        store: EventLog,
        session_id: str,
        *,
        publish: Publish | None = None,
        block: int = RESERVE_BLOCK,
        turn_id: str | None = None,
        owner: str | None = None,
    ) -> None:
        """``turn_id`` and ``owner``: the turn whose journal numbers the events and the
        process holding it; a reservation is refused once that process no longer holds it."""
        self._store = store
        self._session_id = session_id
        self._publish = publish
        self._block = block
        #: The turn numbering for (set when it starts, if not known before).
        self.turn_id = turn_id
        self._owner = owner
        self._next: int | None = None
        # The numbers that may be handed out without reserving first.
        self._reserved = 0
        self._failed = False
        # The first number handed out, and the last number of the log before it.
        self._first = 0
        self._before = 0
        # The start or reservation under way, which every taker that needs it waits for.
        self._preparing: asyncio.Future[None] | None = None

    @property
    def next(self) -> int | None:
        """The next number to hand out (None until started, or when numbering failed)."""
        return self._next

    @property
    def observed(self) -> bool:
        """Whether anyone is told of the numbered events (:meth:`publish` does nothing
        otherwise: the caller need not build what it would publish)."""
        return self._publish is not None

    def take_now(self) -> int | None:
        """The next number when handing it out needs no I/O — numbering has started and the
        number is reserved, as all but one in :data:`RESERVE_BLOCK` are; None otherwise, and
        then :meth:`take` must be awaited (the per-event path takes no coroutine for it)."""
        seq = self._next
        if seq is None or seq > self._reserved:
            return None
        self._next = seq + 1
        return seq

    async def take(self) -> int | None:
        """The next number, reserved durably first when it passes the reservation; None
        when the store could not say where numbering starts (the store numbers rows then).

        The number is assigned after the last await, so the caller publishes it before any
        other task can take a later one. Raises :class:`~drover.errors.LeaseLostError` when
        this process no longer holds the turn."""
        while True:
            seq = self.take_now()
            if seq is not None:
                return seq
            if self._failed:
                return None
            await self._prepared()

    async def ensure(self, count: int) -> None:
        """Until ``count`` numbers (at most a block) can be taken with :meth:`take_now`, or
        numbering failed: a caller that must not be cancelled between taking several
        numbers waits here first."""
        while not self._failed and (self._next is None or self._next + count - 1 > self._reserved):
            await self._prepared()

    async def _prepared(self) -> None:
        preparing = self._preparing
        if preparing is None:
            preparing = self._preparing = asyncio.ensure_future(self._prepare())
            preparing.add_done_callback(_seen)
        # Shielded: a taker cancelled (Esc) leaves the reservation to the others, and takes
        # no number.
        await asyncio.shield(preparing)

    async def _prepare(self) -> None:
        """Start numbering, or reserve the block from the next number on."""
        try:
            if self._next is None:
                try:
                    last, first = await self._store.log_bounds(self._session_id)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._failed = True
                    log.error("journal: cannot number events (%s); the store numbers them", exc)
                    return
                self._next = self._first = first
                self._before = last
                self._reserved = first - 1
                return
            seq = self._next
            upto = seq + self._block - 1
            try:
                await self._store.reserve_seqs(
                    self._session_id, upto, turn_id=self.turn_id, owner=self._owner
                )
            except (asyncio.CancelledError, LeaseLostError):
                raise
            except Exception as exc:
                # Handed out unreserved (a crash could let recovery reuse it); the next
                # number tries again.
                log.warning("journal: could not reserve event numbers (%s)", exc)
                upto = seq
            self._reserved = max(self._reserved, upto)
        finally:
            self._preparing = None

    def advance_past(self, seq: int) -> None:
        """Numbers up to ``seq`` were used by the store itself (events it logged)."""
        if self._next is not None:
            self._next = max(self._next, seq + 1)

    def publish(
        self, seq: int, turn_id: str | None, payload: dict[str, Any], prev: int | None = None
    ) -> None:
        """Tell the observer of event ``seq``; ``prev`` is the number of the event before it
        in the log, when the store says (events it numbered), else the number handed out
        before ``seq`` — numbers are handed out without gaps after the first, which follows
        the log's last number when the turn began."""
        if self._publish is None:
            return
        if prev is None:
            prev = seq - 1 if seq > self._first else self._before
        try:
            self._publish(seq, turn_id, payload, prev)
        except Exception:
            log.exception("journal: the event observer failed")


class StreamMarks:
    """Where each live delta of one text block ends, to cut its coalesced rows at them.

    Deltas come in batches (a flush's worth, see :mod:`~drover.journal.text_buffer`) and are
    kept as two flat lists, so that feeding and cutting them is done by C loops (``extend``,
    ``accumulate``, ``bisect``, slices) rather than by a Python step per delta.
    """

    def __init__(self) -> None:
        # The numbers of the deltas not yet written whole, and where each ends, in offsets of
        # the block's raw text (non-decreasing: bisect finds where a row ends among them).
        self._seqs: list[int] = []
        self._ends: list[int] = []
        self._fed = 0
        self._written = 0

    def feed(self, seqs: Iterable[int], lengths: Iterable[int]) -> None:
        """Deltas numbered ``seqs``, of ``lengths`` raw characters, in the order fed."""
        ends = self._ends
        self._seqs += seqs
        ends += islice(accumulate(lengths, initial=self._fed), 1, None)
        if ends:  # (the last pending delta ends where the fed text does)
            self._fed = ends[-1]

    def unwritten(self) -> int:
        """Raw characters fed but not yet written."""
        return self._fed - self._written

    def pending_ends(self) -> list[int]:
        """Where each delta not yet written whole ends, in raw characters from the first not
        written: the places the next row may end so that it holds only whole deltas."""
        written = self._written
        return [end - written for end in self._ends] if written else self._ends[:]

    def release(
        self, raw_len: int, stored_len: int
    ) -> tuple[int, int, tuple[tuple[int, int], ...] | None] | None:
        """``raw_len`` characters are being written as ``stored_len`` (redaction may change
        the length): the row's first and last number and its marks. When the lengths differ
        offsets cannot be mapped: the marks are then only the row's end, when a delta ends
        there, and None otherwise."""
        seqs, ends = self._seqs, self._ends
        if raw_len <= 0 or not seqs:
            self._written += max(raw_len, 0)
            return None
        start, end = self._written, self._written + raw_len
        # The deltas the row holds whole: those ending at or before its end.
        whole = bisect_right(ends, end)
        first = seqs[0]
        if whole:
            last, last_end = seqs[whole - 1], ends[whole - 1]
        else:
            last, last_end = first, start
        if end > last_end and whole < len(seqs):
            last = seqs[whole]  # the row ends inside this delta
        marks = None
        if raw_len == stored_len:
            cut = ends[:whole] if start == 0 else map(sub, ends[:whole], repeat(start))
            marks = tuple(zip(seqs[:whole], cut, strict=True))
        elif whole and end == last_end:
            # Redaction changed the length: only the row's end maps to a delta's end.
            marks = ((last, stored_len),)
        if whole:
            del seqs[:whole], ends[:whole]
        self._written = end
        return first, last, marks
