"""The runner: the one owner of every turn's life in a process, on top of the journal.

Every front door (the library's :class:`~drover.agent.agent.Agent`, ``-p``, the REPL, ``drover
serve``) starts its turns here. The runner

- keeps the turns running in this process, one per session (:class:`RunningTurn`: its task,
  its id once recorded, its open permission questions); a second turn on a busy session is
  refused here, and the journal refuses one another live process runs — and so is a turn on
  a session held between turns (:attr:`Runner.holds`, :mod:`drover.runtime.holds`), but the
  one its holder starts;
- before a turn starts, recovers that session's turn left ``running`` by a dead process (never
  another session's: that one is its own takeover's to resume), tells followers through
  ``on_recovered``, and reloads the session's history when the journal moved on since it was
  loaded (a recovery, another process's turn, a discard);
- loads the session's "always" grants from the journal at each turn's start and keeps new
  ones there;
- runs the turn with the journal as a reliable event sink next to the caller's live sinks,
  holds an owner lease on it and renews it, and ends it truthfully whatever stops it;
- routes permission questions: each waits in :attr:`RunningTurn.requests` for an answer from
  :meth:`decide` (any front door), a live sink, or the session's permission handler;
- with a :class:`~drover.telemetry.Telemetry`, observes each turn (its spans and metrics, as
  live sinks next to the caller's; see :mod:`drover.telemetry.watch`) and each recovery; the
  ids of the turn a task works for are on its log records either way
  (:data:`~drover.telemetry.logs.TURN_LOG`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from drover.core.conversation import ConversationManager
from drover.core.events import (
    Decision,
    Error,
    Incomplete,
    PermissionRequest,
    event_to_dict,
    turn_status,
)
from drover.core.messages import Message, Prompt, Usage
from drover.core.sinks import EventSink, Fanout
from drover.errors import DroverError, SessionBusyError
from drover.journal.file_images import TurnFiles
from drover.journal.history import CallsConsulted, build_history
from drover.journal.journal import Journal
from drover.journal.owners import owner_id
from drover.journal.protocol import SessionStore, Store
from drover.journal.records import EventRecord, SessionRecord, TurnRecord
from drover.journal.redact import Redactor
from drover.journal.rules import started_event
from drover.journal.writes import EndTurn
from drover.providers.base import Provider
from drover.runtime.holds import SessionHolds
from drover.runtime.queue import TurnQueue
from drover.runtime.turns import FollowUp, PermissionHandler, RunningTurn, TurnWatcher
from drover.telemetry.logs import TURN_LOG, TurnLog
from drover.telemetry.setup import Telemetry
from drover.telemetry.watch import TurnWatch, watch_recovery
from drover.tools.registry import ToolRegistry
from drover.turn.loop import LoopSettings, TurnControl, TurnOptions
from drover.turn.permissions import PermissionPolicy
from drover.turn.state import AgentSession, JournalMark, TurnOutcome

LEASE_SECONDS = 30.0
#: The recorded error of a turn interrupted because its runner shut down (the agent was closed,
#: the process is stopping): not the user's doing.
SHUT_DOWN = "interrupted: drover shut down while the turn ran"

log = logging.getLogger(__name__)

#: ``(session_id, seq, turn_id, payload, prev)`` of each numbered event.
SessionPublish = Callable[[str, int, str | None, dict[str, Any], int], None]


@dataclass(frozen=True, slots=True)
class SplitHistory:
    committed: list[Message]
    pending: list[Message]


async def load_history(store: SessionStore, session_id: str) -> SplitHistory:
    """Committed history up to the last completed turn (not rewound); later turns' work is
    pending."""
    loaded = await store.turns_with_messages(session_id)
    # A rewound completed turn does not count: the turns before it are as they were before it.
    last_done = max(
        (i for i, (t, _) in enumerate(loaded) if t.status == "completed" and not t.discarded),
        default=-1,
    )
    # Stored calls only answer for missing results: none needed, none loaded.
    consulted = CallsConsulted()
    split = SplitHistory(
        committed=build_history(loaded[: last_done + 1], consulted),
        pending=build_history(loaded[last_done + 1 :], consulted),
    )
    if not consulted.ids:
        return split
    calls = [c for turn_id in consulted.turns(loaded) for c in await store.tool_calls(turn_id)]
    return SplitHistory(
        committed=build_history(loaded[: last_done + 1], calls),
        pending=build_history(loaded[last_done + 1 :], calls),
    )


def journal_mark(turn: TurnRecord | None) -> JournalMark | None:
    """What a session's last turn looks like; a session whose mark changed must be reloaded
    (every rewind stamps the last turn's ``rewound_at``)."""
    return None if turn is None else (turn.id, turn.status, turn.discarded, turn.rewound_at)


class Runner:
    def __init__(
        self,
        store: Store,
        *,
        redactor: Redactor | None = None,
        lease_seconds: float = LEASE_SECONDS,
        on_event: SessionPublish | None = None,
        on_recovered: Callable[[str], None] | None = None,
        on_idle: Callable[[str], None] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        """``on_event(session_id, seq, turn_id, payload, prev)`` sees every event of every
        turn as the journal numbers it, live text deltas included, in increasing order, with
        the number of the event before it in the log (the server's hub).
        ``on_recovered(session_id)`` hears of a dead process's turn this runner ended: its
        events reached the log without being published, so followers go back to the log.
        ``on_idle(session_id)`` hears that no turn of the session runs here after having
        published its events: each turn's end, however the turn was started (a front door,
        the queue, a takeover), and events logged while none ran (a rewind, a queue's change)
        — the server's hub lets the session's live feed go then.
        ``telemetry``: what turns and recoveries are observed with (None: nothing)."""
        self.store = store
        self.telemetry = telemetry
        self.on_event = on_event
        self.on_recovered = on_recovered
        self.on_idle = on_idle
        self.redactor = redactor or Redactor()
        self.lease_seconds = lease_seconds
        #: The URL whose webhook every turn started here announces its end to, unless the turn
        #: names its own (``drover serve --webhook``); kept on the turn's row.
        self.webhook: str | None = None
        self.owner = owner_id()
        self._running: dict[str, RunningTurn] = {}
        self._closing = False
        #: The sessions' queued messages: queued, cancelled, and run after each turn.
        self.queue = TurnQueue(
            store,
            running=self.running,
            start=self.start,
            publish_logged=self.publish_logged,
            telemetry=lambda: self.telemetry,
        )
        #: Sessions held between turns here (a rewind; a message replacing the running turn).
        self.holds = SessionHolds(store, self.owner, lease_seconds)

    # -- sessions ------------------------------------------------------------------------------

    async def discard_pending(self, session: AgentSession) -> None:
        """Drop the session's unfinished work, in the journal and then in memory (a journal
        that could not mark it keeps it pending, here too)."""
        if session.id in self._running:
            raise SessionBusyError(session.id, self._running[session.id].turn_id or "")
        await self.store.discard_pending(session.id)
        session.discard_pending()
        session.journal_mark = journal_mark(await self.store.last_turn(session.id))

    async def recover(self, session_id: str | None = None) -> dict[str, str]:
        """End turns left ``running`` by dead processes (their work becomes pending): one
        session's, or with None every session's (a takeover's sweep). Followers are told
        through ``on_recovered``. Returns ``{turn_id: session_id}`` of the turns ended."""
        recovered = await self.store.recover_orphans(session_id=session_id)
        found: dict[str, str] = {}
        for turn_id in recovered:
            if session_id is not None:
                found[turn_id] = session_id
            elif (turn := await self.store.get_turn(turn_id)) is not None:
                found[turn_id] = turn.session_id
        if self.on_recovered is not None:
            for each in dict.fromkeys(found.values()):
                try:
                    self.on_recovered(each)
                except Exception:
                    log.exception("runner: the recovery observer failed")
        if self.telemetry is not None and found:
            # (after the followers were told: a cancellation here loses only spans)
            await watch_recovery(self.telemetry, self.store, found)
        return found

    async def open_session(
        self,
        *,
        workdir: Path,
        model: str,
        session_id: str | None = None,
        continue_latest: bool = False,
        owner: str | None = None,
    ) -> tuple[SessionRecord, bool]:
        """The session to run turns on, and whether opening it created it: ``session_id``'s
        (created for ``owner`` when new, atomically: two openers of one new id get the one
        session, whose owner is its creator's — see its ``owner``), the latest of ``workdir``
        (``continue_latest``), or a new one."""
        if session_id is not None:
            record = await self.store.get_session(session_id)
            if record is not None:
                return record, False
            return await self.store.open_session(
                session_id, workdir=str(workdir), model=model, owner=owner
            )
        if continue_latest:
            record = await self.store.latest_session(str(workdir))
            if record is None:
                raise DroverError(f"no session to continue in {workdir}")
            return record, False
        record = await self.store.create_session(workdir=str(workdir), model=model, owner=owner)
        return record, True

    async def agent_session(
        self,
        record: SessionRecord,
        *,
        provider: Provider,
        tools: ToolRegistry,
        workdir: Path,
        policy: PermissionPolicy,
        settings: LoopSettings,
        convo: ConversationManager,
    ) -> AgentSession:
        """The stored session made ready to run turns: its own dead turn recovered, its history
        and grants loaded."""
        if record.id not in self._running:
            await self.recover(record.id)
        mark = journal_mark(await self.store.last_turn(record.id))
        history = await load_history(self.store, record.id)
        convo.extend(history.committed)
        policy.set_grants(g.rule for g in await self.store.grants(record.id))
        session = AgentSession(
            provider=provider,
            tools=tools,
            workdir=workdir,
            policy=policy,
            convo=convo,
            settings=settings,
            session_id=record.id,
            pending=history.pending,
        )
        session.journal_mark = mark
        return session

    async def reload(self, session: AgentSession) -> None:
        """Take the session's history as the journal holds it now (after a rewind)."""
        history = await load_history(self.store, session.id)
        session.reload(history.committed, history.pending)
        session.journal_mark = journal_mark(await self.store.last_turn(session.id))

    async def _refresh(self, session: AgentSession) -> None:
        """Bring the session up to date with the journal before a turn starts."""
        await self.recover(session.id)
        mark = journal_mark(await self.store.last_turn(session.id))
        if mark != session.journal_mark:
            history = await load_history(self.store, session.id)
            session.reload(history.committed, history.pending)
            session.journal_mark = mark
        store = self.store
        session_id = session.id
        session.policy.set_grants(g.rule for g in await store.grants(session_id))
        session.policy.remember = functools.partial(store.add_grant, session_id)

    # -- turns ---------------------------------------------------------------------------------

    def running(self, session_id: str) -> RunningTurn | None:
        """The turn running on the session in this process, if any."""
        return self._running.get(session_id)

    def running_count(self) -> int:
        """How many turns run in this process."""
        return len(self._running)

    def start(
        self,
        session: AgentSession,
        prompt: Prompt | None,
        live: Sequence[EventSink] = (),
        *,
        on_permission: PermissionHandler | None = None,
        options: TurnOptions | None = None,
        webhook: str | None = None,
        claim: str | None = None,
        follow: bool = True,
        hold: str | None = None,
    ) -> RunningTurn:
        """Start a turn (``prompt=None`` resumes) in a task of its own, which outlives its
        caller; :meth:`RunningTurn.wait_started` gives its id once recorded. ``options`` (the
        turn's ``deps`` and output schema) are this turn's only: the journal never keeps them.
        ``webhook`` (else the runner's :attr:`webhook`) is kept on the turn's row: its end is
        announced there, by whichever process ends it.
        ``claim``: the queued message ``prompt`` comes from, taken in the turn's start (the
        task raises :class:`~drover.errors.QueueChangedError` when it is no longer the next).
        With ``follow``, the session's queued messages run after the turn, one turn each, with
        the same live sinks, handler and options (:class:`~drover.runtime.queue.TurnQueue`).
        ``hold``: the token of a hold on the session (:attr:`holds`) the turn takes over.

        Raises :class:`~drover.errors.SessionBusyError` at once when this process runs a turn
        on the session or holds it other than by ``hold`` (the task raises it when another
        live process runs a turn or holds the session). Permission questions go to
        ``on_permission`` when given, else wait for :meth:`decide` or a live sink's answer.
        """
        if self._closing:
            raise DroverError("shutting down: no new turns")
        busy = self._running.get(session.id)
        if busy is not None:
            raise SessionBusyError(session.id, busy.turn_id or "")
        self.holds.check(session.id, hold)
        loop = asyncio.get_running_loop()
        running = RunningTurn(
            session_id=session.id, started=loop.create_future(), claim=claim, hold=hold
        )
        if follow:
            running.then = FollowUp(session, tuple(live), on_permission, options)
        self._running[session.id] = running  # before any await: a second start sees it
        sinks = [TurnWatcher(running, on_permission), *live]
        hook = webhook or self.webhook
        running.task = loop.create_task(self._drive(session, prompt, sinks, running, options, hook))
        running.task.add_done_callback(functools.partial(self._forget, running))
        return running

    def _forget(self, running: RunningTurn, task: asyncio.Task[TurnOutcome]) -> None:
        if self._running.get(running.session_id) is running:
            del self._running[running.session_id]
            self._idle(running.session_id)
        running.cancel_helpers()
        if not running.started.done():
            if task.cancelled():
                running.started.cancel()
            elif task.exception() is not None:
                running.started.set_exception(task.exception())  # type: ignore[arg-type]
            else:
                running.started.set_exception(DroverError("the turn ended before it started"))
        # Retrieved, so that a start that failed is not also logged as never retrieved.
        if not running.started.cancelled():
            running.started.exception()
        failure = None if task.cancelled() else task.exception()
        if failure is not None and running.turn_id is not None:
            log.error(
                "turn %s on session %s failed: %r", running.turn_id, running.session_id, failure
            )
        # Only once the session is free here: a message queued while it was not is seen.
        if running.then is not None and running.turn_id is not None and not self._closing:
            self.queue.follow(running.then)

    async def run(
        self, session: AgentSession, prompt: Prompt | None, live: Sequence[EventSink] = ()
    ) -> TurnOutcome:
        """Run one turn (``prompt=None`` resumes) with the journal recording it.

        Raises :class:`~drover.errors.SessionBusyError` when a turn of the session is running
        in a live process. Cancelling the call interrupts the turn: the call raises
        ``CancelledError`` once its end is recorded. Live consumers are isolated: one that
        raises is detached and the turn goes on. The turn stops — ``Incomplete``/``Error`` with
        reason ``error`` — when the journal fails for good or another process takes the turn
        over (lost lease).
        """
        running = self.start(session, prompt, live)
        assert running.task is not None
        try:
            return await asyncio.shield(running.task)
        except asyncio.CancelledError:
            if not running.task.done():
                running.interrupt()
                await running.finished()
            raise

    def interrupt(self, session_id: str, why: str | None = None) -> str | None:
        """Interrupt the session's turn running here (``why``: see
        :meth:`RunningTurn.interrupt`); its id (None: none runs here)."""
        running = self._running.get(session_id)
        if running is None or running.turn_id is None:
            return None
        running.interrupt(why)
        return running.turn_id

    def decide(self, session_id: str, request_id: str, decision: Decision) -> bool:
        """Answer a permission question of the session's turn running here."""
        running = self._running.get(session_id)
        request = None if running is None else running.requests.get(request_id)
        return request is not None and request.decide(decision)

    def open_requests(self, session_id: str) -> list[PermissionRequest]:
        running = self._running.get(session_id)
        return [] if running is None else running.open_requests()

    async def shutdown(self, why: str = SHUT_DOWN) -> None:
        """Refuse new turns, interrupt every running one (``why`` recorded as its error) and
        wait until each has recorded how it ended."""
        self._closing = True
        await self.queue.close()
        running = tuple(self._running.values())
        for turn in running:
            turn.interrupt(why)
        for turn in running:
            await turn.finished()

    async def _drive(
        self,
        session: AgentSession,
        prompt: Prompt | None,
        live: Sequence[EventSink],
        running: RunningTurn,
        options: TurnOptions | None = None,
        webhook: str | None = None,
    ) -> TurnOutcome:
        await self._refresh(session)
        prepared = session.prepare(prompt)
        stored_message = prepared.user_message
        if stored_message is not None:
            stored_message = self.redactor.redact_message(stored_message)
        watch = None if self.telemetry is None else self._watch(session)
        begin = asyncio.ensure_future(
            self._begin(session, stored_message, watch, webhook, running.claim, running.hold)
        )
        try:
            turn = await asyncio.shield(begin)
        except BaseException as exc:
            if watch is not None:
                watch.abandon(exc)
            if not isinstance(exc, asyncio.CancelledError):
                raise
            # Interrupted while the turn row was being written: it must not stay running.
            with contextlib.suppress(Exception):
                started = await begin
                await self._end_unrecorded(session.id, started.id)
            raise
        if running.hold is not None:
            self.holds.taken(session.id, running.hold)
        TURN_LOG.set(TurnLog(session.id, turn.id) if watch is None else watch.log_fields(turn.id))
        if watch is not None:
            live = (*live, *watch.sinks)
        tools = session.tools

        def is_read_only(name: str) -> bool:
            tool = tools.get(name)
            return tool is not None and tool.read_only

        control = running.control
        on_event = self.on_event
        journal = Journal(
            self.store,
            session.id,
            redactor=self.redactor,
            is_read_only=is_read_only,
            turn_id=turn.id,
            owner=self.owner,
            on_failure=lambda failure: control.stop("error", str(failure)),
            publish=None if on_event is None else functools.partial(on_event, session.id),
            hold_messages=True,  # the Fanout shows what the journal holds back only later
            on_commit=self._on_commit,
        )
        running.journal = journal
        sink = Fanout([journal], live=live)
        # The turn's tools record what each file held before they write it (a rewind's).
        options = replace(options or TurnOptions(), files=TurnFiles(self.store, turn.id))
        renewal = asyncio.get_running_loop().create_task(self._renew(turn.id, control))
        try:
            if running.claim is not None:
                self.queue.count("started")  # the turn's start took the message
                await journal.note(started_event(running.claim, turn.id))
            outcome = await session.execute(
                prepared, sink, turn_id=turn.id, control=control, options=options
            )
        finally:
            renewal.cancel()
            await asyncio.wait([renewal])
            await journal.aclose()
            if watch is not None:
                watch.close()
            if not journal.ended and journal.failure is None:
                await self._end_unrecorded(session.id, turn.id)
            # The session's last turn as the journal now holds it (None: unsure; the next
            # turn reloads the session).
            end = running.end
            recorded = journal.ended and journal.failure is None
            session.journal_mark = (
                (turn.id, turn_status(end), False, None) if recorded and end is not None else None
            )
        if journal.failure is not None and outcome.event.type == "done" and not journal.ended:
            # The turn finished, but the journal could not record that it did.
            raise journal.failure
        return outcome

    def _watch(self, session: AgentSession) -> TurnWatch:
        assert self.telemetry is not None
        provider = session.provider
        return TurnWatch(
            self.telemetry,
            session_id=session.id,
            protocol=provider.name,
            model=provider.model,
            max_tokens=session.settings.max_tokens,
            redactor=self.redactor,
        )

    @property
    def _on_commit(self) -> Callable[[int, float], None] | None:
        metrics = None if self.telemetry is None else self.telemetry.metrics
        return None if metrics is None else metrics.journal_committed

    async def _begin(
        self,
        session: AgentSession,
        message: Message | None,
        watch: TurnWatch | None,
        webhook: str | None,
        claim: str | None = None,
        hold: str | None = None,
    ) -> TurnRecord:
        """Record the turn's start (with the ``webhook`` its end is announced to); with traces,
        keep where its span is and link it to the span of the unfinished turn it continues (the
        session's last, when work is pending)."""
        turn = await self.store.begin_turn(
            session.id,
            message,
            self.owner,
            self.lease_seconds,
            webhook=webhook,
            claim=claim,
            hold=hold,
        )
        if watch is not None:
            mark = session.journal_mark
            continues = None
            if session.pending and mark is not None and mark[1] != "completed":
                continues = mark[0]
            await watch.began(self.store, turn.id, continues)
        return turn

    async def _end_unrecorded(self, session_id: str, turn_id: str) -> None:
        """The turn ended without its end reaching the journal (interrupted again while it
        cleaned up, or before it began): close it as recovery would, so it never stays
        ``running``, with its one terminal event."""
        error = "interrupted before the end of the turn was recorded"
        try:
            worked = bool(await self.store.turn_messages(turn_id))
            kind = Incomplete if worked else Error
            end = kind(reason="interrupted", error=error, usage=Usage(partial=True))
            ending = EndTurn(
                turn_id=turn_id,
                status="interrupted",
                reason="interrupted",
                error=error,
                owner=self.owner,
                event=event_to_dict(end),
            )
            logged: list[EventRecord] = (await self.store.write_batch([ending]))[0]
        except DroverError as exc:
            log.error("could not end turn %s: %s (recovery will)", turn_id, exc)
            return
        # Live followers (the server's streams) see the end as they see any other.
        self.publish_logged(session_id, logged)

    def publish_logged(self, session_id: str, logged: Sequence[EventRecord]) -> None:
        """Tell ``on_event`` of events the store logged on its own."""
        publish = self.on_event
        if publish is None:
            return
        for record in logged:
            try:
                prev = record.end_seq - 1 if record.prev is None else record.prev
                publish(session_id, record.end_seq, record.turn_id, dict(record.payload), prev)
            except Exception:
                log.exception("runner: the event observer failed")
        if session_id not in self._running:
            self._idle(session_id)

    def _idle(self, session_id: str) -> None:
        """Tell ``on_idle`` that no turn of the session runs here."""
        if self.on_idle is not None:
            try:
                self.on_idle(session_id)
            except Exception:
                log.exception("runner: the idle observer failed")

    async def _renew(self, turn_id: str, control: TurnControl) -> None:
        """Keep the lease; stop the turn when it is lost or cannot be renewed before expiry."""
        held_until = time.monotonic() + self.lease_seconds
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                held = await self.store.renew_lease(turn_id, self.owner, self.lease_seconds)
            except DroverError as exc:
                if time.monotonic() + self.lease_seconds / 3 < held_until:
                    log.warning("could not renew the lease of turn %s: %s", turn_id, exc)
                    continue
                control.stop("error", f"the journal could not renew this turn's lease: {exc}")
                return
            if not held:
                control.stop("error", "another process took this turn over (its lease had expired)")
                return
            held_until = time.monotonic() + self.lease_seconds
