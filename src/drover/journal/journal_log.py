"""The journal's writes: how :class:`~drover.journal.journal.Journal`'s decisions become queued
writes and numbered log rows.

:class:`JournalLog` is the journal's base: what it does with a decision once made — number an
event and queue its log row with the write it goes with (:meth:`JournalLog._log`), make a log
row refer to the message it carries so the message is stored once, queue a turn's writes and
a step's results message, drain the queue, and fail the journal when a write cannot be made.
The journal itself (its ``__init__`` sets every attribute declared here) decides, event by
event, which of these happen and when they are made durable.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from drover.core.events import TERMINAL_TOOL_STATES, Event, ToolStateChanged, event_to_dict
from drover.core.messages import Message
from drover.errors import LeaseLostError, StoreError
from drover.journal.flush_timer import FlushTimer
from drover.journal.journal_queue import WriteQueue
from drover.journal.numbering import Numbering
from drover.journal.protocol import TurnJournal
from drover.journal.redact import Redactor
from drover.journal.step_results import StepResults, tool_call_write
from drover.journal.text_buffer import TextBuffers
from drover.journal.writes import (
    MESSAGE_OF,
    AppendEvent,
    AppendMessage,
    JournalWrite,
    referring,
    referring_output,
)

# The journal's logger: these are its messages.
log = logging.getLogger("drover.journal.journal")

FinishedContentHook = Callable[[Message], Awaitable[None] | None]


class JournalLog:
    store: TurnJournal
    session_id: str
    #: Why the journal stopped writing, if it did.
    failure: StoreError | None
    _turn_id: str | None
    _step: int
    # (seq in the turn, text) of the last finished assistant message stored.
    _answer: tuple[int, str] | None
    _writes: WriteQueue
    _numbers: Numbering
    _text: TextBuffers
    _redactor: Redactor
    _results: StepResults
    _timer: FlushTimer
    _wrap: Callable[[dict[str, Any]], dict[str, Any]] | None
    _is_read_only: Callable[[str], bool] | None
    _on_failure: Callable[[StoreError], None] | None
    _on_finished: FinishedContentHook | None
    _max_attempts: int
    # The turn's end is decided (queued): no event of the session is numbered after it.
    _ending: bool

    async def note(self, payload: dict[str, Any]) -> bool:
        """Log an event of the session that is not the turn's own (a message queued or
        cancelled while it runs), numbered and published among the turn's events, and make
        it durable; False when the turn's record is closing (its end is decided, or the
        journal failed): the caller logs it otherwise, after the turn."""
        if self._ending or self.failure is not None:
            return False
        await self._numbers.ensure(1)
        # No await from this check to the number's taking (a number is reserved): the turn's
        # end cannot be numbered before this event.
        if self._ending or self.failure is not None:
            return False
        await self._log(str(payload["type"]), payload=self._redactor.redact_obj(payload))
        return await self._drain()

    # -- writes --------------------------------------------------------------------------------

    def _turn_write(
        self,
        what: str,
        make: Callable[[str], JournalWrite],
        done: Callable[[Any], None] | None = None,
    ) -> None:
        turn_id = self._turn_id
        if turn_id is None:
            log.warning("journal: %s before the turn started; skipped", what)
            return
        self._writes.push(what, make(turn_id), done=done)

    def _answered(self, message: Message, seq: Any) -> None:
        """A finished assistant message was stored as the turn's message ``seq``."""
        if isinstance(seq, int) and seq > 0:
            self._answer = (seq, message.text)

    def _results_ahead(self, event: ToolStateChanged, stored: str | None) -> None:
        """Queue the step's results message with its last call's end (see
        :mod:`drover.journal.step_results`), its outputs as the ends' log rows have them
        (``stored``: this one's, redacted)."""
        message = self._results.ended(event.call_id, event.output, event.is_error, stored)
        if message is not None:
            self._results.written = message
            self._turn_write(
                "append tool results with the last call's end",
                lambda t: AppendMessage(t, message),
                done=self._results.stored,
            )

    def _upsert(
        self, event: ToolStateChanged, payload: dict[str, Any], row: AppendEvent | None = None
    ) -> None:
        """Queue the call's new state, its input and output those of the event's redacted
        ``payload`` (see :data:`_MADE_AT_ONCE` for when it is made before ``send``
        returns); with ``row``, the state's log row in the same write."""
        read_only = False
        if self._is_read_only is not None:
            try:
                read_only = bool(self._is_read_only(event.name))
            except Exception:
                log.exception("journal: is_read_only failed for %s", event.name)
        step = self._step
        self._turn_write(
            f"record tool call {event.call_id} as {event.state}",
            lambda t: tool_call_write(event, t, step, read_only, payload, row),
        )

    async def _log_state(self, event: ToolStateChanged, payload: dict[str, Any]) -> None:
        """Number a call's new state and queue its log row with the call's write (``payload``:
        the event, redacted). A call's end goes in the call's write, its row referring to the
        call's row for the output, which is then stored once (when the store makes writes
        together; a worker's log keeps the output in its row)."""
        if event.state in TERMINAL_TOOL_STATES and self._writes.groups:
            await self._log(
                event, payload=payload, attach=partial(self._upsert_logged, event, payload)
            )
        else:
            await self._log(event, payload=payload, before=partial(self._upsert, event, payload))

    def _upsert_logged(
        self, event: ToolStateChanged, payload: dict[str, Any], row: AppendEvent | None
    ) -> bool:
        """Queue a call's end with its log row (``row``), which refers to the call's row for
        its output when there is one; True when the row went with it (see :meth:`_log`)."""
        if row is None or self._turn_id is None or not isinstance(payload.get("output"), str):
            self._upsert(event, payload)
            return False
        self._upsert(event, payload, referring_output(row, event.call_id))
        return True

    async def _log(
        self,
        event: Event | str,
        *,
        payload: dict[str, Any] | None = None,
        before: Callable[[], object] | None = None,
        attach: Callable[[AppendEvent | None], bool] | None = None,
        **extra: Any,
    ) -> None:
        """Number ``event`` and queue its log row (``payload``: the event's form, redacted,
        when the caller has it — required when ``event`` is only its type); ``before`` queues
        the write the row goes with, after the number is taken, so nothing can be made
        between the two. ``attach`` does the same with the row at hand (None when the session
        is not numbered): True when it queued the row itself, inside its write. The number is
        published as soon as it is taken, with no await between (numbers go out in order)."""
        if isinstance(event, str):
            kind = event
            assert payload is not None, "an event given by its type needs its payload"
        else:
            kind = event.type
            if payload is None:
                payload = event_to_dict(event)
                if extra:
                    payload.update(extra)
                payload = self._redactor.redact_obj(payload)
        turn_id = self._turn_id
        seq = self._numbers.take_now()
        if seq is None:
            seq = await self._numbers.take()
        if before is not None:
            before()
        if seq is not None:
            self._publish(seq, turn_id, payload)
        write = AppendEvent(self.session_id, turn_id, payload, seq, seq)
        if attach is not None and attach(write if seq is not None else None):
            return
        self._writes.push(f"log the {kind} event", write)

    def _referring(
        self, row: AppendEvent | None, message: Message, body: dict[str, Any]
    ) -> AppendEvent | None:
        """``row`` referring to its ``message`` (see :func:`~drover.journal.writes.referring`)
        when the store writes them together."""
        return None if row is None or not self._writes.groups else referring(row, message, body)

    def _push_ref(
        self, message: Message, body: dict[str, Any], seq: int, row: AppendEvent | None
    ) -> bool:
        """Queue ``row`` referring to the stored message ``seq``; False when it cannot."""
        ref = self._referring(row, message, body)
        if ref is None:
            return False
        event = {**ref.event, MESSAGE_OF: seq}
        self._writes.push(
            "log the event", AppendEvent(ref.session_id, ref.turn_id, event, ref.seq, ref.last_seq)
        )
        return True

    def _publish(self, seq: int, turn_id: str | None, payload: dict[str, Any]) -> None:
        self._numbers.publish(seq, turn_id, payload if self._wrap is None else self._wrap(payload))

    async def _drain(self) -> bool:
        """Make the queued writes (see :mod:`~drover.journal.journal_queue`); False when the
        journal failed."""
        if self.failure is not None:
            return False
        return await self._writes.drain()

    def _fail(self, what: str, exc: Exception) -> None:
        if self.failure is not None:
            return
        attempts = "" if isinstance(exc, LeaseLostError) else f" after {self._max_attempts} tries"
        failure = StoreError(f"the journal could not {what}{attempts}: {exc}")
        failure.__cause__ = exc
        self.failure = failure
        log.error("journal: %s; nothing more of this turn is recorded", failure)
        self._writes.failed = True
        self._writes.clear()
        self._text.clear()
        self._timer.cancel()
        if self._on_failure is not None:
            self._on_failure(failure)

    async def _finished(self, message: Message) -> None:
        if self._on_finished is None:
            return
        try:
            result = self._on_finished(message)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("journal: on_finished_content failed")
