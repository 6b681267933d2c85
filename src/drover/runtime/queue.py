"""Queued messages: what a session runs, in order and once each, after the turn running now.

A message posted while a turn runs (``if_busy="enqueue"``) is written to the journal at once
(:class:`~drover.journal.protocol.MessageQueue`) — so it survives a crash — and announced in
the session's event log as ``message_queued`` (a cancellation as ``message_cancelled``): by
the running turn's journal, the log's one writer while the turn runs, or by the store when no
turn runs. When a turn ends the runner starts the next queued message's turn
(:meth:`TurnQueue.follow`), with the live sinks, permission handler and options the ended turn
had, and so on until the queue is empty; that turn's start takes the message in the same
transaction (:meth:`~drover.journal.protocol.TurnLeases.begin_turn` with ``claim``), so two
processes can never both run it, and logs ``message_started`` first. A queued message's turn
is an ordinary turn: the session's pending work goes before it.

Who runs a queue: the process whose turn ended; after a crash, the process that takes the dead
turn over (:mod:`drover.cluster.takeover` resumes a session with queued messages by running
them) or, for a session left with queued messages and no turn, the takeover's sweep
(:meth:`TurnQueue.waiting`); a message queued on an idle session is started by the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from drover.errors import DroverError, QueueChangedError, SessionBusyError
from drover.journal.records import EventRecord, QueuedMessage
from drover.journal.rules import cancelled_event, queued_event

if TYPE_CHECKING:
    from drover.core.messages import Prompt
    from drover.core.sinks import EventSink
    from drover.journal.protocol import Store
    from drover.runtime.turns import FollowUp, PermissionHandler, RunningTurn
    from drover.telemetry.metrics import QueueOutcome
    from drover.telemetry.setup import Telemetry
    from drover.turn.loop import TurnOptions
    from drover.turn.state import AgentSession

log = logging.getLogger(__name__)

#: What a message sent to a session whose turn runs does: ``reject`` it
#: (:class:`~drover.errors.SessionBusyError`), ``enqueue`` it (run after the turn), stop the
#: turn keeping its work and run the message next (``interrupt``: the message's turn resumes
#: the work), or stop the turn and discard its work first (``rollback``).
IfBusy: TypeAlias = Literal["reject", "enqueue", "interrupt", "rollback"]

#: The events of a queue another process may ask this one to log.
QUEUE_EVENTS = ("message_queued", "message_cancelled")

#: Gives a queue's event to the process running the session's turn; False when it cannot.
Forward = Callable[[str, dict[str, Any]], Awaitable[bool]]

#: How often a queue's event is tried again when the turn it was given to ended meanwhile.
ANNOUNCE_ATTEMPTS = 5
#: How often (seconds) a caller waiting for its queued message's turn reads the journal: the
#: process that runs or cancels it may be another one, which tells this one nothing.
WATCH_EVERY = 0.2


class StartTurn(Protocol):
    """Starts a queued message's turn (the runner's ``start``)."""

    def __call__(
        self,
        session: AgentSession,
        prompt: Prompt | None,
        live: Sequence[EventSink] = (),
        *,
        on_permission: PermissionHandler | None = None,
        options: TurnOptions | None = None,
        claim: str | None = None,
        follow: bool = True,
    ) -> RunningTurn: ...


class TurnQueue:
    """The queue side of a :class:`~drover.runtime.runner.Runner` (see the module docstring),
    over what it needs of it: the ``store``, the turn ``running`` on a session here, ``start``
    to start a queued message's turn, ``publish_logged`` for events the store logged on its
    own, and the ``telemetry`` that counts queue outcomes (None: none)."""

    def __init__(
        self,
        store: Store,
        *,
        running: Callable[[str], RunningTurn | None],
        start: StartTurn,
        publish_logged: Callable[[str, Sequence[EventRecord]], None],
        telemetry: Callable[[], Telemetry | None],
    ) -> None:
        self._store = store
        self._running = running
        self._start = start
        self._publish_logged = publish_logged
        self._telemetry = telemetry
        self._tasks: set[asyncio.Task[None]] = set()
        #: Callers waiting for the turn of a message they queued, by message id.
        self._waiting: dict[str, asyncio.Future[RunningTurn]] = {}
        #: Reaches the process running a session's turn when it is not this one (several
        #: processes on one journal); None: the event is not logged (the queue still is).
        self.forward: Forward | None = None

    # -- queueing ------------------------------------------------------------------------------

    async def enqueue(
        self, session_id: str, content: str, *, webhook: str | None = None
    ) -> QueuedMessage:
        """Queue ``content`` durably, with the ``webhook`` its turn's end is announced to
        (whichever process runs it), and announce it (``message_queued``)."""
        message, running, logged = await self._store.enqueue_message(
            session_id, content, webhook=webhook
        )
        self.count("queued")
        await self._announce(session_id, queued_event(message), running, logged)
        return message

    async def cancel(self, session_id: str, message_id: str) -> bool:
        """Cancel a message still queued and announce it (``message_cancelled``); whether it
        was still queued."""
        done, running, logged = await self._store.cancel_queued(session_id, message_id)
        if not done:
            return False
        self.count("cancelled")
        waiter = self._waiting.pop(message_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_exception(QueueChangedError(f"queued message {message_id} was cancelled"))
        await self._announce(session_id, cancelled_event(message_id), running, logged)
        return True

    def count(self, outcome: QueueOutcome) -> None:
        """Count what the queue did in this process (``drover_queue_messages_total``).

        Counted where the store's change is made — queueing and cancelling here, a queued
        message's start where its turn takes it (:class:`~drover.runtime.runner.Runner`) — so a
        message every front door queues is counted once, and an event this process only logs
        for another is not counted."""
        telemetry = self._telemetry()
        if telemetry is not None and telemetry.metrics is not None:
            telemetry.metrics.queue_message(outcome)

    async def announce(self, session_id: str, event: dict[str, Any]) -> None:
        """Log a queue's event through the session's turn running here, or the store when
        none runs (another process asked it of this one)."""
        running, logged = await self._store.log_queue_event(session_id, event)
        await self._announce(session_id, event, running, logged)

    async def _announce(
        self,
        session_id: str,
        event: dict[str, Any],
        running_turn: str | None,
        logged: EventRecord | None,
    ) -> None:
        """Publish what the store logged, or have the running turn's journal log it."""
        store = self._store
        for _ in range(ANNOUNCE_ATTEMPTS):
            if logged is not None:
                self._publish_logged(session_id, [logged])
                return
            if running_turn is None:
                return
            local = self._running(session_id)
            if local is None:  # another process runs it
                forward = self.forward
                if forward is None or not await forward(session_id, event):
                    log.info(
                        "queue: a %s event of session %s is not logged", event["type"], session_id
                    )
                return
            if local.journal is None:
                # Recorded a moment ago; its journal is made before its first event.
                with contextlib.suppress(Exception):
                    await local.wait_started()
            journal = local.journal
            if journal is not None and local.turn_id == running_turn and await journal.note(event):
                return
            # That turn is ending: log the event after its end (or through the next turn).
            await local.finished()
            running_turn, logged = await store.log_queue_event(session_id, event)
        log.warning("queue: could not log a %s event of session %s", event["type"], session_id)

    # -- running -------------------------------------------------------------------------------

    def follow(self, then: FollowUp) -> None:
        """Run the session's queued messages, if any, now that its turn here ended."""
        task = asyncio.get_running_loop().create_task(self._follow(then))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _follow(self, then: FollowUp) -> None:
        try:
            await self.start_next(then)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                "queue: session %s: the next queued message did not start (%s)",
                then.session.id,
                exc,
            )

    async def start_next(self, then: FollowUp) -> RunningTurn | None:
        """Start the turn of the session's next queued message; None when none is queued or
        a turn of the session runs (here or elsewhere: its end runs the queue)."""
        session = then.session
        while True:
            if self._running(session.id) is not None:
                return None
            waiting = await self._store.queued_messages(session.id)
            if not waiting:
                return None
            head = waiting[0]
            try:
                running = self._start(
                    session,
                    head.content,
                    then.live,
                    on_permission=then.on_permission,
                    options=then.options,
                    claim=head.id,
                    follow=then.follow,
                )
            except SessionBusyError:
                return None
            try:
                await running.wait_started()
            except QueueChangedError:
                continue  # run or cancelled meanwhile: look again
            except SessionBusyError:
                return None
            waiter = self._waiting.pop(head.id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(running)
            return running

    async def turn_of(self, session_id: str, message_id: str) -> RunningTurn | str:
        """The turn that runs the queued message: started here (now or later), or the id of
        the turn another process started for it — read from the journal every
        :data:`WATCH_EVERY` seconds, as that process tells this one nothing. Raises
        :class:`~drover.errors.QueueChangedError` when it is cancelled, here or elsewhere."""
        running = self._running(session_id)
        if running is not None and running.claim == message_id:
            return running
        loop = asyncio.get_running_loop()
        waiter = self._waiting.get(message_id)
        if waiter is None:
            waiter = self._waiting[message_id] = loop.create_future()
        watch = loop.create_task(self._watch(session_id, message_id))
        either: set[asyncio.Future[Any]] = {waiter, watch}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            await asyncio.wait([watch])
        if waiter.done():
            return waiter.result()
        if self._waiting.get(message_id) is waiter:
            del self._waiting[message_id]
        return watch.result()

    async def _watch(self, session_id: str, message_id: str) -> str:
        """The id of the turn another process started for the queued message, once the
        journal shows it (:class:`~drover.errors.QueueChangedError`: it was cancelled)."""
        while True:
            await asyncio.sleep(WATCH_EVERY)
            every = await self._store.queued_messages(session_id, every=True)
            message = next((m for m in every if m.id == message_id), None)
            if message is None or message.status == "cancelled":
                raise QueueChangedError(f"queued message {message_id} was cancelled")
            if message.status != "started" or message.turn_id is None:
                continue
            local = self._running(session_id)
            if local is None or local.claim != message_id:  # (else it starts here: the waiter)
                return message.turn_id

    async def waiting(self, limit: int = 100) -> list[str]:
        """Sessions with queued messages and no running turn (a crash left them so)."""
        return await self._store.waiting_sessions(limit)

    async def close(self) -> None:
        """Stop starting queued messages (the runner shuts down; they stay queued)."""
        tasks = tuple(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(DroverError("shutting down: the queued message waits"))
        self._waiting.clear()
