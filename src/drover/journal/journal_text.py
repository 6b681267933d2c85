"""The journal's streamed text and its flushes: when the buffered text becomes queued writes,
and when deferred writes are made.

:class:`JournalText` sits between :class:`~drover.journal.journal_log.JournalLog` (how a
decision becomes queued writes and numbered log rows) and
:class:`~drover.journal.journal.Journal` (which decides, event by event, and takes the live
deltas into its :class:`~drover.journal.text_buffer.TextBuffers` itself, on its hot path). It
takes what is safe to write out of the buffers, makes the queued writes on a flush, leaves
writes nothing waits on for the next drain and runs the flush timer's flush (at most
``flush_interval`` after the oldest unwritten text or deferred write).

Each text flush writes one ``partial_text`` row: its text, the numbers of its deltas and the
marks where each ends — the log's tail while the step streams (read back as a coalesced
``text_delta`` event ``{"text", "index", "step"}``) and what recovery folds into a partial
message. That one row is the whole cost of a flush (about one small page). When the step's
message is stored, its rows move into the log as one row per block whose text refers to the
message. A worker's deltas are not numbered one by one: each of its flushed rows is numbered
and published here, as one event, exactly as the row holds it.
"""

from __future__ import annotations

from collections.abc import Callable

from drover.core.events import TextDelta
from drover.errors import LeaseLostError
from drover.journal.journal_log import JournalLog, log
from drover.journal.rules import flushed_text_event


class JournalText(JournalLog):
    """The journal's base for its text and flushes (module doc); the journal's ``__init__``
    sets every attribute declared here."""

    _clock: Callable[[], float]
    # When text was last taken out of the buffers (the time gate counts from it).
    _last_flush: float
    # Whether each live delta gets a number of its own (not in a worker's journal).
    _number_deltas: bool

    def _publish_delta(self, delta: TextDelta, seq: int) -> None:
        """Tell the observer of a live delta numbered ``seq`` (as it would read it back)."""
        body = {"type": "text_delta", "text": delta.text, "index": delta.index, "step": self._step}
        self._publish(seq, self._turn_id, body)

    async def _take_text(self, *, final: bool) -> bool:
        """Queue the buffered text that is safe to write (all of it when ``final``); whether
        there was any. A worker's rows are numbered and published here, each as one event
        (its deltas were not)."""
        if self._number_deltas:
            writes = self._text.take(self._turn_id, final=final)
            for write in writes:
                self._writes.push("append partial text", write)
        else:
            # The numbers first: once the text is taken nothing may wait (a cancellation
            # there would lose it).
            await self._numbers.ensure(self._text.blocks)
            writes = self._text.take(self._turn_id, final=final)
            for write in writes:
                event = flushed_text_event(write.text, write.block_index, write.step)
                await self._log("text_delta", payload=event)  # (a number at hand: no wait)
        self._last_flush = self._clock()
        return bool(writes)

    async def _flush(self) -> None:
        self._timer.cancel()
        await self._take_text(final=False)
        await self._drain()

    def _defer(self) -> None:
        """Leave the queued writes for the next drain, at the latest the timer's."""
        if len(self._writes):
            self._timer.start()

    async def _timed_flush(self) -> None:
        # The flush is under way (the timer is no longer pending); an authoritative flush
        # waits for it instead of cancelling it.
        try:
            await self._take_text(final=False)
            await self._drain()
        except LeaseLostError as exc:
            self._fail("number flushed text", exc)
        except Exception:
            log.exception("journal: timed flush failed")
