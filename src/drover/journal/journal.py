"""The journal: the event sink that records a turn in the store as it happens.

The loop awaits :meth:`Journal.send` for every event. What each event does (seeds 003/004):

==========================  ================================================================
``turn_started``            logged (the runner made the turn row before the turn began)
``text_delta``              buffered per (step, block) and flushed once the oldest unwritten
                            text is ``flush_interval`` (250 ms) old — checked on each delta and
                            by a timer — or ``flush_bytes`` (1024 B) arrived since the last flush
``thinking_delta``          not persisted mid-turn (the finished message carries it)
``tool_state``              the call is upserted; at ``input-streaming`` all buffered text is
                            flushed first (held tail included), at ``input-available`` the rest
``assistant_message``       authoritative: the timer is cancelled; the step's last text, the
                            message, its log row (referring to it) and the fold of the step's
                            text rows into it (:mod:`drover.journal.fold`) go in one write
``tool_results``            the results message is appended — already done, as a rule, with
                            the step's last call's end (:mod:`drover.journal.step_results`)
``retry`` (discard)         the step's buffered text is written, then its text rows no longer
                            feed recovery (the log keeps them, before the retry's row)
``done``/``incomplete``/    remaining text is flushed and the turn ended with
``error``                   :func:`~drover.core.events.turn_status`
``worker``                  handed to the worker's journal (:mod:`drover.journal.worker_log`)
``tool_progress``           not stored: transient (:func:`drover.core.events.is_transient`)
==========================  ================================================================

Every event except the deltas is appended to the session's event log. Streamed text goes in
``partial_text`` rows, one per flush (:mod:`drover.journal.journal_text`); when the step's
message is stored, its rows move into the log as one row per block whose text refers to the
message; the ``assistant_message`` row refers to the message too, ``done`` to the answer's
message, and a call's end to the call's row, which holds its output (the store puts them back
when the log is read). An n-byte answer thus costs n bytes of message and the marks of its
deltas once the step ends: O(n), each byte stored once.

Everything persisted is redacted first; streamed text through a
:class:`~drover.journal.redact.StreamRedactor` (:mod:`drover.journal.text_buffer`).

Numbering (:mod:`drover.journal.numbering`): the journal numbers every event as it emits it —
each live text delta included — and hands it to ``publish`` at once, in increasing order, with
the number of the event before it (``prev``); rows are written with those numbers. A
coalesced text row covers its deltas' numbers and marks where each ends; a finished message
or a discarding retry first writes the step's text not written yet, so every number handed
out lands in a row of its own event, as it was published (its text redacted). A worker's
deltas are not numbered one by one: each of its text flushes is numbered and published as
one event, exactly as its row holds it.

Writes queue in order (:mod:`drover.journal.journal_queue`; how a decision becomes queued writes
and numbered log rows: :mod:`drover.journal.journal_log`). Those a guarantee waits on are made
before ``send`` returns, together with every write queued before them, in one transaction when
the store can (group commit, :mod:`drover.journal.writes`): the turn's start; a text flush; a
tool call's first state (the eager flush), ``running`` (durable before the tool starts) and its
end (an output is never lost once reported; the step's last end carries the results message, so
it is durable before the next model request); a permission question and its call's state; the
assistant message; a discarding retry; the turn's end. The rest — ``step_started``, ``usage``,
``tool_start``/``tool_done``, ``tool_results``, ``compacted``, the ``input-available`` state —
are numbered and published at once and written with the next of those or by the flush timer, at
most ``flush_interval`` later: a crash loses at most that much of them, at the tail of the log.
With ``hold_messages`` (the Runner's journal) a finished message with tool calls is not made
before ``send`` returns but with its first call's next state, which is (``running``, a
permission question, the call's end); the :class:`~drover.core.sinks.Fanout` holds it back from the
printer and other live consumers until then (:attr:`Journal.holds_back`), so nothing is shown
before it is durable. A one-call tool step thus costs three commits (the eager flush; the
message with ``running``; the end with the results) instead of seventeen.

A write that fails is retried (:mod:`~drover.journal.journal_queue`); one that still fails, or
a lost lease, fails the journal: :attr:`Journal.failure` says why, nothing more is written (the
record stays a consistent prefix of the turn) and ``on_failure`` is called. ``send`` itself
never raises but for the cancellation that interrupts the turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, assert_never, cast

from drover.core.events import (
    TERMINAL_TOOL_STATES,
    AssistantMessage,
    Compacted,
    Done,
    Error,
    Event,
    HookRun,
    Incomplete,
    PermissionRequest,
    Retry,
    StepStarted,
    TextDelta,
    ThinkingDelta,
    ToolDone,
    ToolProgress,
    ToolResults,
    ToolStart,
    ToolStateChanged,
    TurnStarted,
    UsageReport,
    WorkerEvent,
    event_to_dict,
    turn_status,
)
from drover.core.messages import Message, message_to_dict
from drover.errors import LeaseLostError, StoreError
from drover.journal.flush_timer import FlushTimer
from drover.journal.journal_log import FinishedContentHook, log
from drover.journal.journal_queue import WriteQueue
from drover.journal.journal_text import JournalText
from drover.journal.numbering import Numbering, Publish
from drover.journal.protocol import EventLog, TurnJournal
from drover.journal.records import EventRecord
from drover.journal.redact import Redactor
from drover.journal.step_results import StepResults
from drover.journal.text_buffer import TextBuffers
from drover.journal.worker_log import WorkerLog, worker_event
from drover.journal.writes import (
    TEXT_OF,
    AppendEvent,
    AppendMessage,
    DiscardPartialText,
    EndTurn,
    JournalWrite,
    ReplaceMessage,
)

#: Tool-call states made durable before ``send`` returns: a tool_use starting (the text before
#: it is flushed with it), a call waiting for the user (what a client reads of the session
#: shows the question), a call about to run (never recorded as not run once it may have
#: started), and a call's end (its output is never lost once reported). ``input-available``
#: goes with the next write (the assistant message), at the latest the flush timer's.
_MADE_AT_ONCE = frozenset(
    {"input-streaming", "awaiting-permission", "running", *TERMINAL_TOOL_STATES}
)


class Journal(JournalText):
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
        hold_messages: bool = False,
        on_commit: Callable[[int, float], None] | None = None,
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
        end is an event of the log, not the end of the parent's turn.
        ``hold_messages``: the sink that shows events to live consumers holds each one back
        while :attr:`holds_back` is true (:class:`~drover.core.sinks.Fanout` does), so a step's
        assistant message with tool calls need not be durable when ``send`` returns: it is
        written with the next write that is (the call's ``running``, a permission question
        or the call's end), and shown only then. ``on_commit(writes, seconds)`` hears of each
        transaction made (its workers' journals' too)."""
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
        self._on_commit = on_commit
        # A worker's log stores no messages (its events carry them): its writes are made one
        # at a time and none refers to a message by its number.
        self._writes = WriteQueue(
            store,
            together=not isinstance(store, WorkerLog),
            max_attempts=max_attempts,
            retry_delay=retry_delay,
            on_failure=self._fail,
            on_commit=on_commit,
        )
        self._turn_id: str | None = turn_id
        #: Why the journal stopped writing, if it did.
        self.failure: StoreError | None = None
        # (seq in the turn, text) of the last finished assistant message stored.
        self._answer: tuple[int, str] | None = None
        self._step = 0
        self._text = TextBuffers(self._redactor)
        self._numbers = numbering or Numbering(
            cast(EventLog, store), session_id, publish=publish, turn_id=turn_id, owner=owner
        )
        # A worker's deltas are not numbered one by one: its flushed rows are (see send).
        self._number_deltas = wrap is None
        self._observed = self._numbers.observed
        self._wrap = wrap
        self._last_flush = clock()
        self._timer = FlushTimer(flush_interval, self._timed_flush, clock=clock, sleep=sleep)
        #: The journals of the workers run inside this turn, by (parent call id, worker).
        self._workers: dict[tuple[str, int], Journal] = {}
        # The step's results message, written with its last call's end (when writes are
        # made together).
        self._results = StepResults()
        self._hold = hold_messages
        # The write count up to which the last event is not yet durable (see holds_back), and
        # the finished messages written with a later write, for on_finished_content.
        self._held_upto = 0
        self._finished_later: list[Message] = []
        self._ending = False

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
        return self._timer.pending

    @property
    def holds_back(self) -> bool:
        """Whether an event ``send`` took is not durable yet although a guarantee says it is
        made before it is shown: it must not reach a live consumer until this is false
        again (with ``hold_messages``; see :class:`~drover.core.sinks.Fanout`)."""
        # (the comparison first: it is false but for the few events after a held message)
        return self._held_upto > self._writes.made and self.failure is None

    # -- the sink ------------------------------------------------------------------------------

    async def send(self, event: Event) -> None:
        if self.failure is not None:
            return
        try:
            if isinstance(event, TextDelta):
                # Most of a step's events: taken here, in this frame — not in a coroutine or a
                # method of their own — with no await unless a gate flushes or a block of
                # numbers is reserved.
                text = event.text
                if text and self._turn_id is not None:
                    seq = None
                    if self._number_deltas:
                        seq = self._numbers.take_now()
                        if seq is None:
                            seq = await self._numbers.take()
                        if self._observed and seq is not None:
                            self._publish_delta(event, seq)
                    # The time gate counts from the last flush or, after a pause with nothing
                    # buffered, from the first delta since: the oldest unwritten text is what
                    # it bounds (as the timer does), so the first delta of a step is not
                    # written alone because the previous step was slow.
                    buffers = self._text
                    if buffers.unflushed == 0:
                        self._timer.start()
                        self._last_flush = self._clock()
                    if (
                        buffers.feed(self._step, event.index, text, seq) >= self._flush_bytes
                        or self._clock() - self._last_flush >= self._interval
                    ):
                        await self._flush()
            else:
                await self._handle(event)
            if self._finished_later and not self.holds_back:
                finished, self._finished_later = self._finished_later, []
                for message in finished:
                    await self._finished(message)
        except asyncio.CancelledError:
            raise
        except LeaseLostError as exc:  # refused a reservation of numbers: the turn is not ours
            self._fail(f"number a {event.type} event", exc)
        except Exception as exc:  # a bug in recording: the record can no longer be trusted
            log.exception("journal: could not record a %s event", event.type)
            self._fail(f"record a {event.type} event", exc)

    async def aclose(self) -> None:
        """Write what is still buffered; stop the timer."""
        self._timer.close()
        for worker in self._workers.values():
            await worker.aclose()
        if self.failure is None:
            try:
                await self._take_text(final=True)
            except LeaseLostError as exc:
                self._fail("number the last text", exc)
                return
            if await self._writes.drain():
                finished, self._finished_later = self._finished_later, []
                for message in finished:
                    await self._finished(message)

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
                on_commit=self._on_commit,
            )
        return journal

    async def _handle(self, event: Event) -> None:
        match event:
            # (the most frequent first: a step's four call states and three events that wait
            # for the next write)
            case ToolStateChanged():
                urgent = False
                if event.state == "input-streaming":
                    # A tool_use block begins: the text blocks before it are finished, so all
                    # their text is written now (nothing held back), before the tool's state
                    # is numbered — a snapshot or replay from that number misses none of it.
                    self._timer.cancel()
                    await self._take_text(final=True)
                elif event.state == "input-available":
                    # Text that came after the call began (rare) is written with its input.
                    self._timer.cancel()
                    urgent = await self._take_text(final=False)
                # Redacted once, for its log row and the call's row.
                payload = self._redactor.redact_obj(event_to_dict(event))
                await self._log_state(event, payload)
                if event.state in TERMINAL_TOOL_STATES:
                    self._results_ahead(event, payload.get("output"))
                if urgent or event.state in _MADE_AT_ONCE:
                    await self._drain()
                else:
                    self._defer()
                return
            case ToolStart() | ToolDone() | UsageReport() | Compacted() | HookRun():
                # Nothing waits on these: they go with the next write a guarantee needs.
                await self._log(event)
                self._defer()
                return
            case WorkerEvent():
                await self._worker_journal(event).send(event.event)
                return
            case TextDelta() | ThinkingDelta():
                return  # (send takes the text deltas)
            case ToolProgress():
                return  # transient: live consumers only
            case TurnStarted():
                # Written at once: the log of a turn begins with it, whatever cuts it short.
                self._turn_id, self._step = event.turn_id, 0
                if self._wrap is None:
                    self._numbers.turn_id = event.turn_id
            case StepStarted():
                self._step = event.step
                self._results.clear()
                await self._log(event)
                self._defer()
                return
            case Retry():
                if event.discard_partial:
                    # The text shown so far is written (live clients saw every delta of it),
                    # then the step's rows stop feeding recovery; the retry event tells a
                    # reader to drop them.
                    self._timer.cancel()
                    await self._take_text(final=True)
                    self._text.fold_from(self._step)
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
                # The step's last text is written before the message (which folds it): every
                # delta a live client saw is in the log, at its number.
                self._timer.cancel()
                await self._take_text(final=True)
                if not event.partial and self._writes.groups:
                    self._results.expect(event.message)
                message, step = self._redactor.redact_message(event.message), self._step
                fold_from = None if event.partial else self._text.fold_from(step)
                # The log row's message is the stored one: redacted once, not again as a tree.
                body = message_to_dict(message)
                payload = {"type": event.type, "message": body, "partial": event.partial}

                def append(row: AppendEvent | None) -> bool:
                    # The message, with its log row referring to it when it can (stored once).
                    ref = self._referring(row, message, body)
                    self._turn_write(
                        "append assistant message",
                        lambda t: AppendMessage(t, message, event.partial, step, ref, fold_from),
                        done=None if event.partial else partial(self._answered, message),
                    )
                    return ref is not None

                await self._log(event, payload=payload, attach=append)
                if self._holds(event):
                    # Written with the call's next state, which is made at once (running,
                    # awaiting permission, its end); not shown before (holds_back).
                    self._held_upto = self._writes.pushed
                    self._finished_later.append(message)
                    self._defer()
                    return
                await self._drain()
                if not event.partial:
                    await self._finished(message)
                return
            case PermissionRequest():
                pass  # the turn waits for the user: written at once
            case ToolResults():
                ahead, kept, seq = self._results.take_written(event.message)
                # (the message written ahead, when it is this one: its outputs were redacted
                # once, with the calls' ends)
                message = kept or self._redactor.redact_message(event.message)
                body = message_to_dict(message)
                payload = {"type": event.type, "message": body}
                if ahead is not None and ahead == message:
                    # Written with the last call's end (made, or queued before this: a
                    # cancellation can leave its number unknown): only the log row is left,
                    # referring to the message when its number is known; nothing waits on it.
                    ref = None if seq is None else partial(self._push_ref, message, body, seq)
                    await self._log(event, payload=payload, attach=ref)
                    self._defer()
                else:
                    make: Callable[[str], JournalWrite] = (
                        partial(AppendMessage, message=message)
                        if ahead is None
                        else partial(ReplaceMessage, seq=seq, message=message)
                    )
                    await self._log(
                        event,
                        payload=payload,
                        before=lambda: self._turn_write("record tool results", make),
                    )
                    await self._drain()
                await self._finished(message)
                return
            case Done() | Incomplete() | Error() if self._wrap is not None:
                # A worker's end: logged with its status; the parent's turn goes on.
                self._timer.cancel()
                await self._take_text(final=True)
                await self._log(event, status=turn_status(event))
                await self._drain()
                return
            case Done() | Incomplete() | Error():
                self._timer.cancel()
                for worker in self._workers.values():
                    # Text a worker cut short still holds: numbered and written before the
                    # turn's end (its events are the turn's).
                    await worker._write_held_text()
                await self._take_text(final=True)
                reason = None if isinstance(event, Done) else event.reason
                error = None if isinstance(event, Done) else self._redactor.redact(event.error)
                # The terminal event is numbered when written, after those the store logs
                # closing the turn (see _end_turn).
                self._end_turn(event, reason, error)
                await self._drain()
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
        self._ending = True

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
                self._numbers.publish(record.end_seq, turn_id, shown, record.prev)

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

    def _holds(self, event: AssistantMessage) -> bool:
        """Whether ``event`` waits for the next write instead of being made before ``send``
        returns: a finished message with tool calls (the next event is one of their states)
        in a turn's own journal, when a holding sink shows the events and the store makes
        writes together. An answer without calls is made at once: the turn's end refers to
        it by its number."""
        return (
            self._hold
            and self._wrap is None
            and self._writes.groups
            and not event.partial
            and bool(event.message.tool_uses)
        )

    # -- text ----------------------------------------------------------------------------------

    async def _write_held_text(self) -> None:
        """Number and write all the text still buffered, now (a worker's, before its parent's
        turn ends)."""
        if await self._take_text(final=True):
            await self._drain()
