"""Sequence numbers of a session's events while one journal is the log's only writer.

A journal holds its turn's lease, so it alone appends to the session's event log. It numbers
every event as it emits it — each live text delta too — and hands the numbered event to an
observer (the server's hub) at once, before the event is written; the log rows then carry
those numbers. A coalesced text row covers the numbers of the deltas it holds and records
where each ends (:class:`StreamMarks`), so a replay can start inside it.

Numbers are reserved durably in blocks (:meth:`EventLog.reserve_seqs`) before one is handed out
past the reservation. A process that dies loses the numbers it handed out but never wrote; the
events recovery then logs are numbered after the reservation, so a client holding a lost
number finds it in a hole of the log and is told to reset instead of silently skipping.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from itertools import accumulate, islice, repeat
from operator import sub
from typing import Any

from drover.store.base import EventLog

log = logging.getLogger(__name__)

#: ``(seq, turn_id, payload)`` of each event as the journal numbers it.
Publish = Callable[[int, str | None, dict[str, Any]], None]

RESERVE_BLOCK = 1024


class Numbering:
    """Hands out a session's next sequence numbers, reserving them in blocks."""

    def __init__(
        self,
        store: EventLog,
        session_id: str,
        *,
        publish: Publish | None = None,
        block: int = RESERVE_BLOCK,
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._publish = publish
        self._block = block
        self._next: int | None = None
        self._reserved = 0
        self._failed = False

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
        when the store could not say where numbering starts (the store numbers rows then)."""
        if self._next is None:
            if self._failed:
                return None
            try:
                self._next = await self._store.next_event_seq(self._session_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed = True
                log.error("journal: cannot number events (%s); the store numbers them", exc)
                return None
            self._reserved = self._next - 1
        seq = self._next
        self._next += 1
        if seq > self._reserved:
            upto = seq + self._block - 1
            try:
                await self._store.reserve_seqs(self._session_id, upto)
                self._reserved = upto
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("journal: could not reserve event numbers (%s)", exc)
        return seq

    def advance_past(self, seq: int) -> None:
        """Numbers up to ``seq`` were used by the store itself (events it logged)."""
        if self._next is not None:
            self._next = max(self._next, seq + 1)

    def publish(self, seq: int, turn_id: str | None, payload: dict[str, Any]) -> None:
        if self._publish is None:
            return
        try:
            self._publish(seq, turn_id, payload)
        except Exception:
            log.exception("journal: the event observer failed")

    async def release(self) -> None:
        """Shrink the reservation to the numbers handed out (the turn ended in order)."""
        if self._next is None or self._reserved <= self._next - 1:
            return
        try:
            await self._store.reserve_seqs(self._session_id, self._next - 1)
            self._reserved = self._next - 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("journal: could not release event numbers (%s)", exc)


class StreamMarks:
    """Where each live delta of one text block ends, to cut its coalesced rows at them.

    Deltas come in batches (a flush's worth, see :mod:`~drover.store.text_buffer`) and are
    kept as two flat lists, so that feeding and cutting them is done by C loops (``extend``,
    ``accumulate``, ``bisect``, slices) rather than by a Python step per delta.
    """

    def __init__(self) -> None:
        # The numbers of the deltas not yet written whole, and where each ends, in offsets of
        # the block's raw text (non-decreasing: bisect finds where a row ends among them).
        self._seqs: list[int] = []
        self._ends: list[int] = []
        # Where the first of them starts (the end of the last delta written whole).
        self._start = 0
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

    def first_unstarted(self) -> int | None:
        """The first delta none of whose text was written (its number is in no row yet)."""
        seqs, written = self._seqs, self._written
        if not seqs:
            return None
        if self._start >= written:
            return seqs[0]
        # Delta i (i > 0) starts where delta i - 1 ends.
        i = bisect_left(self._ends, written, 0, len(seqs) - 1) + 1
        return seqs[i] if i < len(seqs) else None

    def release(
        self, raw_len: int, stored_len: int
    ) -> tuple[int, int, tuple[tuple[int, int], ...] | None] | None:
        """``raw_len`` characters are being written as ``stored_len`` (redaction may change
        the length): the row's first and last number and its marks (None when the lengths
        differ, so offsets cannot be mapped)."""
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
        if whole:
            self._start = last_end
            del seqs[:whole], ends[:whole]
        self._written = end
        return first, last, marks
