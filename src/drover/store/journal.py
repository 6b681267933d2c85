"""The journal: the event sink that records a turn in the store as it happens.

The loop awaits :meth:`Journal.send` for every event. What each event does (seeds 003/004):

==========================  ================================================================
``turn_started``            logged (the runner created the turn row before the turn began)
``text_delta``              buffered per (step, block); flushed as appended ``partial_text``
                            when ``flush_interval`` (250 ms) passed since the last flush or
                            ``flush_bytes`` (1024 B) arrived since, checked on every delta and
                            by a timer that fires ``flush_interval`` after the first unflushed
                            delta (so a stalled stream is still written)
``thinking_delta``          not persisted mid-turn (the finished message carries it)
``tool_state``              the tool call is upserted; at ``input-streaming`` all buffered
                            text is flushed first, the redaction's held tail included (the
                            text blocks before a tool_use are finished), and at
                            ``input-available`` what arrived since
``assistant_message``       authoritative: the timer is cancelled, the message appended and the
                            step's deltas deleted in the same write
``tool_results``            the results message is appended
``retry`` (discard)         the step's buffered and stored deltas are dropped
``done``/``incomplete``/    remaining text is flushed and the turn ended with
``error``                   :func:`~drover.events.turn_status`
``worker``                  handed to the worker's own journal (one per worker, made on its
                            first event), which records it under this turn through a
                            :class:`~drover.store.worker_log.WorkerLog`
==========================  ================================================================

Every event except the deltas is appended to the session's event log. Replay of text: each
flush writes its text once as ``partial_text`` and once, in the same transaction, as one
coalesced ``text_delta`` event ``{"text", "index", "step"}`` (see
:meth:`~drover.store.base.Store.append_partial_text`). A replaying client concatenates the
``text_delta`` events of a (step, index), drops them on a ``retry`` with ``discard_partial``
and replaces them with the ``assistant_message`` that ends the step — exactly what a live
client does with the raw deltas. An n-byte answer thus costs about n bytes of deltas, n of
coalesced events, and n each for the message row and its event: O(n), never O(n²).

Everything persisted is redacted first (text on every flush, messages, tool inputs and
outputs, event payloads); streamed text goes through
:class:`~drover.store.redact.StreamRedactor`, which keeps back a tail that could be the start
of a secret until the next flush.

Numbering (:mod:`drover.store.numbering`): the journal numbers every event as it emits it —
each live text delta included — and hands it to ``publish`` at once; rows are written with
those numbers. A coalesced text row covers its deltas' numbers and marks where each ends; the
numbers of deltas a finished message or a discarding retry supersedes before they were written
are covered by that message's or retry's row, so every number handed out lands in some row.

Writes queue in order (:mod:`drover.store.journal_queue`). Those a guarantee waits on are made
before ``send`` returns, together with every write queued before them, in one transaction when
the store can (group commit, :mod:`drover.store.batch`): the turn's start; a text flush; a tool
call's first state (the eager flush), ``running`` (durable before the tool starts) and its end
(an output is never lost once reported); a permission question and its call's state; the
assistant message; the results message (durable before the next model request); a discarding
retry; the turn's end. The rest — ``step_started``, ``usage``, ``tool_start``/``tool_done``,
``compacted``, the ``input-available`` state — are numbered and published at once and written
with the next of those or by the flush timer, at most ``flush_interval`` later: a crash loses
at most that much of them, at the tail of the log. A tool step thus costs five commits
(the eager flush, the message, ``running``, the call's end, the results) instead of seventeen.

A write that fails is retried at once, with a short backoff, up to ``max_attempts`` times while
later writes wait behind it. One that still fails — or a write to a turn this process no longer
holds (:class:`~drover.errors.LeaseLostError`) — fails the journal: :attr:`Journal.failure`
says why (the original error as its cause), nothing more is written, so the durable record
stays a consistent prefix of the turn, and ``on_failure`` is called so the owner can stop the
turn. ``send`` itself never raises but for
the cancellation that interrupts the turn.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, assert_never, cast

from drover.errors import LeaseLostError, StoreError
from drover.events import (
    TERMINAL_TOOL_STATES,
    AssistantMessage,
    Compacted,
    Done,
    Error,
    Event,
    Incomplete,
    PermissionRequest,
    Retry,
    StepStarted,
    TextDelta,
    ThinkingDelta,
    ToolDone,
    ToolResults,
    ToolStart,
    ToolStateChanged,
    TurnStarted,
    UsageReport,
    WorkerEvent,
    event_to_dict,
    turn_status,
)
from drover.messages import Message, message_to_dict
from drover.store.base import EventLog, EventRecord, TurnJournal
from drover.store.batch import (
    MESSAGE_OF,
    TEXT_OF,
    AppendEvent,
    AppendMessage,
    AppendPartialText,
    DiscardPartialText,
    EndTurn,
    JournalWrite,
    ReplaceMessage,
    UpsertToolCall,
)
from drover.store.journal_queue import WriteQueue
from drover.store.numbering import Numbering, Publish, StreamMarks
from drover.store.redact import Redactor, StreamRedactor
from drover.store.step_results import StepResults
from drover.store.worker_log import WorkerLog, worker_event

log = logging.getLogger(__name__)

FinishedContentHook = Callable[[Message], Awaitable[None] | None]


#: Tool-call states made durable before ``send`` returns: a tool_use starting (the text before
#: it is flushed with it), a call waiting for the user (what a client reads of the session
#: shows the question), a call about to run (never recorded as not run once it may have
#: started), and a call's end (its output is never lost once reported). ``input-available``
#: goes with the next write (the assistant message), at the latest the flush timer's.
_MADE_AT_ONCE = frozenset(
    {"input-streaming", "awaiting-permission", "running", *TERMINAL_TOOL_STATES}
)


class Journal:
    def __init__(
        self,
        store: TurnJournal,
        session_id: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        flush_interval: float = 0.25,
        flush_bytes: int = 1024,
        redactor: Redactor | None = None,
        on_finished_content: FinishedContentHook | None = None,
        is_read_only: Callable[[str], bool] | None = None,
        max_attempts: int = 5,
        retry_delay: float = 0.05,
        turn_id: str | None = None,
        owner: str | None = None,
        on_failure: Callable[[StoreError], None] | None = None,
        publish: Publish | None = None,
        numbering: Numbering | None = None,
        wrap: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        """``on_finished_content`` gets each finished message (a complete assistant message or
        a tool results message) as persisted, never partial content. ``is_read_only`` tells
        from a tool name whether the tool has no side effects (recorded on its calls, it decides
        whether a call cut off while running has an unknown outcome; unknown tools count as
        side-effecting). ``sleep`` drives the flush timer; tests pass a fake with ``clock``.
        ``owner`` makes the end of the turn conditional on this process still holding it.
        ``publish`` sees every event with its number as soon as it is numbered.
        A worker's journal shares its parent's ``numbering`` (one writer of the session's
        log numbers every event) and ``wrap``s what it publishes as the worker's event; its
        end is an event of the log, not the end of the parent's turn."""
        self.store = store
        self.session_id = session_id
        self._clock = clock
        self._sleep = sleep
        self._interval = flush_interval
        self._flush_bytes = flush_bytes
        self._redactor = redactor or Redactor()
        self._on_finished = on_finished_content
        self._is_read_only = is_read_only
        self._max_attempts = max_attempts
        self._retry_delay = retry_delay
        self._owner = owner
        self._on_failure = on_failure
        self._writes = WriteQueue(
            store, max_attempts=max_attempts, retry_delay=retry_delay, on_failure=self._fail
        )
        self._turn_id: str | None = turn_id
        #: Why the journal stopped writing, if it did.
        self.failure: StoreError | None = None
        # (seq in the turn, text) of the last finished assistant message stored.
        self._answer: tuple[int, str] | None = None
        self._step = 0
        self._texts: dict[tuple[int, int], StreamRedactor] = {}
        self._marks: dict[tuple[int, int], StreamMarks] = {}
        self._numbers = numbering or Numbering(cast(EventLog, store), session_id, publish=publish)
        self._wrap = wrap
        # The first number of superseded deltas no row holds yet (the next row covers it).
        self._absorb: int | None = None
        self._unflushed = 0
        self._last_flush = clock()
        self._timer: asyncio.Task[None] | None = None
        #: The journals of the workers run inside this turn, by (parent call id, worker).
        self._workers: dict[tuple[str, int], Journal] = {}
        # The step's results message, written with its last call's end (when writes are
        # made together), and its seq in the turn once stored.
        self._results = StepResults()
        # The first number of each step's coalesced text rows (folded into its message).
        self._fold_from: dict[int, int] = {}
        self._ahead: tuple[Message, list[int]] | None = None

    # -- observable state ----------------------------------------------------------------------

    @property
    def turn_id(self) -> str | None:
        return self._turn_id

    @property
    def backlog(self) -> int:
        """Writes not yet made (deferred, or waiting to be retried)."""
        return len(self._writes)

    @property
    def ended(self) -> bool:
        """Whether the turn's end was recorded."""
        return self._writes.ended

    @property
    def timer_pending(self) -> bool:
        return self._timer is not None

    # -- the sink ------------------------------------------------------------------------------

    async def send(self, event: Event) -> None:
        if self.failure is not None:
            return
        try:
            await self._handle(event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in recording: the record can no longer be trusted
            log.exception("journal: could not record a %s event", event.type)
            self._fail(f"record a {event.type} event", exc)

    async def aclose(self) -> None:
        """Write what is still buffered; stop the timer."""
        self._cancel_timer()
        for worker in self._workers.values():
            await worker.aclose()
        if self.failure is None:
            self._take_text(final=True)
            if await self._writes.drain():
                await self._numbers.release()

    def _worker_journal(self, event: WorkerEvent) -> Journal:
        key = (event.call_id, event.worker)
        journal = self._workers.get(key)
        if journal is None:
            if isinstance(self.store, WorkerLog):
                raise TypeError("workers do not run workers of their own")
            what = f"record worker {event.worker} of call {event.call_id}"
            journal = self._workers[key] = Journal(
                WorkerLog(self.store, self.session_id, event.call_id, event.worker),
                self.session_id,
                clock=self._clock,
                sleep=self._sleep,
                flush_interval=self._interval,
                flush_bytes=self._flush_bytes,
                redactor=self._redactor,
                is_read_only=self._is_read_only,
                max_attempts=self._max_attempts,
                retry_delay=self._retry_delay,
                turn_id=self._turn_id,
                on_failure=lambda failure: self._fail(what, failure),
                numbering=self._numbers,
                wrap=partial(worker_event, event.call_id, event.worker),
            )
        return journal

    async def _handle(self, event: Event) -> None:
        match event:
            case WorkerEvent():
                await self._worker_journal(event).send(event.event)
                return
            case TextDelta():
                if self._turn_id is None or not event.text:
                    return
                seq = await self._numbers.take()
                if seq is not None:
                    body = {"type": "text_delta", "text": event.text, "index": event.index}
                    self._publish(seq, self._turn_id, {**body, "step": self._step})
                if self._buffer(event, seq):
                    await self._flush()
                return
            case ThinkingDelta():
                return
            case TurnStarted():
                # Written at once: the log of a turn begins with it, whatever cuts it short.
                self._turn_id, self._step = event.turn_id, 0
            case StepStarted():
                self._step = event.step
                self._results.clear()
                await self._log(event)
                self._defer()
                return
            case Retry():
                if event.discard_partial:
                    self._drop_text(self._step)
                    self._fold_from.pop(self._step, None)
                    step = self._step
                    await self._log(
                        event,
                        before=lambda: self._turn_write(
                            "discard partial text", lambda t: DiscardPartialText(t, step)
                        ),
                    )
                    await self._drain()
                    return
            case AssistantMessage():
                self._cancel_timer()
                self._drop_text(self._step)
                if not event.partial and self._writes.groups:
                    self._results.expect(event.message)
                message, step = self._redactor.redact_message(event.message), self._step
                fold_from = None if event.partial else self._fold_from.pop(step, None)

                def append(row: AppendEvent | None) -> bool:
                    # The message, with its log row referring to it when it can (stored once).
                    ref = None if row is None else self._referring(row, message)
                    self._turn_write(
                        "append assistant message",
                        lambda t: AppendMessage(t, message, event.partial, step, ref, fold_from),
                        done=None if event.partial else partial(self._answered, message),
                    )
                    return ref is not None

                await self._log(event, attach=append)
                await self._drain()
                if not event.partial:
                    await self._finished(message)
                return
            case ToolStateChanged():
                urgent = False
                if event.state == "input-streaming":
                    # A tool_use block begins: the text blocks before it are finished, so all
                    # their text is written now (nothing held back), before the tool's state
                    # is numbered — a snapshot or replay from that number misses none of it.
                    self._cancel_timer()
                    self._take_text(final=True)
                elif event.state == "input-available":
                    # Text that came after the call began (rare) is written with its input.
                    self._cancel_timer()
                    urgent = self._take_text(final=False)
                await self._log(event, before=partial(self._upsert, event))
                if event.state in TERMINAL_TOOL_STATES:
                    self._results_ahead(event)
                if urgent or event.state in _MADE_AT_ONCE:
                    await self._drain()
                else:
                    self._defer()
                return
            case PermissionRequest():
                pass  # the turn waits for the user: written at once
            case ToolResults():
                message = self._redactor.redact_message(event.message)
                ahead, self._ahead = self._ahead, None
                if ahead is not None and ahead[0] == message:
                    # Stored with the last call's end: only its log row is left, and nothing
                    # waits on that; it refers to the message.
                    stored = ahead[1]

                    def refer(row: AppendEvent | None) -> bool:
                        ref = None if row is None or not stored else self._referring(row, message)
                        if ref is None or row is None:
                            return False
                        event_row = {**ref.event, MESSAGE_OF: stored[0]}
                        self._writes.push(
                            "log the tool_results event",
                            AppendEvent(
                                row.session_id, row.turn_id, event_row, row.seq, row.last_seq
                            ),
                        )
                        return True

                    await self._log(event, attach=refer)
                    self._defer()
                    await self._finished(message)
                    return
                if ahead is not None and ahead[1]:
                    seq = ahead[1][0]
                    await self._log(
                        event,
                        before=lambda: self._turn_write(
                            "replace tool results", lambda t: ReplaceMessage(t, seq, message)
                        ),
                    )
                    await self._drain()
                    await self._finished(message)
                    return
                await self._log(
                    event,
                    before=lambda: self._turn_write(
                        "append tool results", lambda t: AppendMessage(t, message)
                    ),
                )
                await self._drain()
                await self._finished(message)
                return
            case Done() | Incomplete() | Error() if self._wrap is not None:
                # A worker's end: logged with its status; the parent's turn goes on.
                self._cancel_timer()
                self._take_text(final=True)
                await self._log(event, status=turn_status(event))
                await self._drain()
                return
            case Done() | Incomplete() | Error():
                self._cancel_timer()
                self._take_text(final=True)
                reason = None if isinstance(event, Done) else event.reason
                error = None if isinstance(event, Done) else self._redactor.redact(event.error)
                # The terminal event is numbered when written, after those the store logs
                # closing the turn (see _end_turn).
                self._end_turn(event, reason, error)
                await self._drain()
                return
            case ToolStart() | ToolDone() | UsageReport() | Compacted():
                # Nothing waits on these: they go with the next write a guarantee needs.
                await self._log(event)
                self._defer()
                return
            case _:
                assert_never(event)
        await self._log(event)
        await self._drain()

    def _end_turn(
        self, event: Done | Incomplete | Error, reason: str | None, error: str | None
    ) -> None:
        turn_id = self._turn_id
        if turn_id is None:
            log.warning("journal: end the turn before the turn started; skipped")
            return

        payload = self._redactor.redact_obj(event_to_dict(event))
        stored = payload
        if self._answer is not None and payload.get("text") == self._answer[1]:
            # The answer is the message just stored: the event refers to it (read back whole).
            stored = {(TEXT_OF if k == "text" else k): v for k, v in payload.items()}
            stored[TEXT_OF] = self._answer[0]

        def ended(logged: list[EventRecord]) -> None:
            # Calls closed and text folded by the store, then the terminal event: written and
            # numbered in one transaction, so published only now (the event as it happened).
            for i, record in enumerate(logged):
                self._numbers.advance_past(record.end_seq)
                shown = payload if i == len(logged) - 1 else dict(record.payload)
                self._numbers.publish(record.end_seq, turn_id, shown)

        write = EndTurn(
            turn_id=turn_id,
            status=turn_status(event),
            reason=reason,
            error=error,
            usage=event.usage,
            owner=self._owner,
            event=stored,
            first_seq=self._numbers.next,
        )
        self._writes.push("end the turn", write, done=ended, ends_turn=True)

    # -- text ----------------------------------------------------------------------------------

    def _buffer(self, delta: TextDelta, seq: int | None) -> bool:
        """Buffer a delta numbered ``seq``; True when a gate says flush now."""
        key = (self._step, delta.index)
        stream = self._texts.get(key)
        if stream is None:
            stream = self._texts[key] = StreamRedactor(self._redactor)
        stream.feed(delta.text)
        if seq is not None:
            self._marks.setdefault(key, StreamMarks()).feed(seq, len(delta.text))
        if self._unflushed == 0:
            self._start_timer()
        self._unflushed += len(delta.text.encode())
        return (
            self._unflushed >= self._flush_bytes
            or self._clock() - self._last_flush >= self._interval
        )

    def _take_text(self, *, final: bool) -> bool:
        """Queue the buffered text that is safe to write (all of it when ``final``); whether
        there was any."""
        took = False
        turn_id = self._turn_id
        for key, stream in sorted(self._texts.items()):
            text = stream.take(final=final)
            marks = self._marks.get(key)
            span = None
            if marks is not None:
                span = marks.release(marks.unwritten() - stream.held_chars, len(text))
            if text and turn_id is not None:
                step, index = key
                first, last, cuts = span if span is not None else (None, None, None)
                write = AppendPartialText(turn_id, step, index, text, first, last, cuts)
                if first is not None:
                    self._fold_from[step] = min(first, self._fold_from.get(step, first))
                self._writes.push("append partial text", write)
                took = True
        if final:
            self._texts.clear()
            self._marks.clear()
        self._unflushed = 0
        self._last_flush = self._clock()
        return took

    def _drop_text(self, step: int) -> None:
        for key in [k for k in self._texts if k[0] == step]:
            del self._texts[key]
            marks = self._marks.pop(key, None)
            first = None if marks is None else marks.first_unstarted()
            if first is not None:
                self._absorb = first if self._absorb is None else min(self._absorb, first)
        if not self._texts:
            self._unflushed = 0

    async def _flush(self) -> None:
        self._cancel_timer()
        self._take_text(final=False)
        await self._drain()

    def _defer(self) -> None:
        """Leave the queued writes for the next drain, at the latest the timer's."""
        if len(self._writes):
            self._start_timer()

    def _start_timer(self) -> None:
        if self._timer is None:
            deadline = self._clock() + self._interval
            self._timer = asyncio.get_running_loop().create_task(self._tick(deadline))

    def _cancel_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    async def _tick(self, deadline: float) -> None:
        await self._sleep(max(0.0, deadline - self._clock()))
        # Past this point the flush is under way; an authoritative flush waits for it instead
        # of cancelling it.
        self._timer = None
        try:
            self._take_text(final=False)
            await self._drain()
        except Exception:
            log.exception("journal: timed flush failed")

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

    def _results_ahead(self, event: ToolStateChanged) -> None:
        """Queue the step's results message with its last call's end (see
        :mod:`drover.store.step_results`)."""
        built = self._results.ended(event.call_id, event.output, event.is_error)
        if built is None:
            return
        message = self._redactor.redact_message(built)
        stored: list[int] = []
        self._ahead = (message, stored)

        def done(seq: Any) -> None:
            if isinstance(seq, int):
                stored.append(seq)

        self._turn_write(
            "append tool results with the last call's end",
            lambda t: AppendMessage(t, message),
            done=done,
        )

    def _upsert(self, event: ToolStateChanged) -> None:
        """Queue the call's new state (see :data:`_MADE_AT_ONCE` for when it is made before
        ``send`` returns)."""
        read_only = False
        if self._is_read_only is not None:
            try:
                read_only = bool(self._is_read_only(event.name))
            except Exception:
                log.exception("journal: is_read_only failed for %s", event.name)
        tool_input = None if event.input is None else self._redactor.redact_obj(dict(event.input))
        output = None if event.output is None else self._redactor.redact(event.output)
        step = self._step
        self._turn_write(
            f"record tool call {event.call_id} as {event.state}",
            lambda t: UpsertToolCall(
                turn_id=t,
                call_id=event.call_id,
                call_index=event.call_index,
                name=event.name,
                state=event.state,
                input=tool_input,
                output=output,
                is_error=event.is_error,
                outcome_unknown=event.outcome_unknown,
                read_only=read_only,
                step=step,
            ),
        )

    async def _log(
        self,
        event: Event,
        *,
        before: Callable[[], object] | None = None,
        attach: Callable[[AppendEvent | None], bool] | None = None,
        **extra: Any,
    ) -> None:
        """Number ``event`` and queue its log row; ``before`` queues the write the row goes
        with, after the number is taken, so nothing can be made between the two. ``attach``
        does the same with the row at hand (None when the session is not numbered): True when
        it queued the row itself, inside its write."""
        payload = self._redactor.redact_obj({**event_to_dict(event), **extra})
        turn_id = self._turn_id
        seq = await self._numbers.take()
        if before is not None:
            before()
        first: int | None = None
        if seq is not None:
            first, self._absorb = self._absorb, None
            self._publish(seq, turn_id, payload)
        write = AppendEvent(self.session_id, turn_id, payload, seq if first is None else first, seq)
        if attach is not None and attach(write if seq is not None else None):
            return
        self._writes.push(f"log the {event.type} event", write)

    def _referring(self, row: AppendEvent, message: Message) -> AppendEvent | None:
        """``row`` with its ``message`` as a reference (:data:`MESSAGE_OF`, set by the store),
        when the row carries exactly that message and the store writes both at once."""
        if not self._writes.groups or row.event.get("message") != message_to_dict(message):
            return None
        event = {
            (MESSAGE_OF if k == "message" else k): (None if k == "message" else v)
            for k, v in row.event.items()
        }
        return AppendEvent(row.session_id, row.turn_id, event, row.seq, row.last_seq)

    def _publish(self, seq: int, turn_id: str | None, payload: dict[str, Any]) -> None:
        self._numbers.publish(seq, turn_id, payload if self._wrap is None else self._wrap(payload))

    async def _drain(self) -> bool:
        """Make the queued writes (see :mod:`~drover.store.journal_queue`); False when the
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
        self._texts.clear()
        self._marks.clear()
        self._cancel_timer()
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
