"""What the HTTP routes act on: a thin adapter over the agent and its runner.

Turns run through the same :class:`~drover.agent.agent.Agent` a library user has: a posted message
starts a turn on the session's handle, in a task of the agent's runner, not of the request, so
the turn outlives every client. The runner allows one turn at a time per session (a second
message gets the running turn's id, :class:`~drover.errors.SessionBusyError`; the journal
refuses a turn another live process runs the same way); interrupting cancels the turn's task,
and the loop records the work done so far (the turn ends ``interrupted``, resumable by the next
message); shutdown interrupts every running turn the same way and waits for their records.

What is the server's own: sessions belong to the token that created them; a request for a turn
running in another process (several processes on one PostgreSQL journal) is sent to that
process; and a permission question waits for an answer from any client, but while no client is
connected to the session at most ``permission_timeout`` seconds (counted again from the moment
the last client leaves) — then it is answered ``deny``, and the tool call ends ``denied`` in the
transcript like any refusal. That wait is the server's permission handler of each session.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from drover.agent.agent import Agent
from drover.agent.rewind import RewindPlan, RewindResult
from drover.agent.session import Session
from drover.cluster.relay import Relay
from drover.cluster.remote_stop import RemoteStops, RunningElsewhere, SendControl
from drover.core.events import (
    Decision,
    Event,
    PermissionRequest,
    TurnStarted,
    event_to_dict,
    is_transient,
)
from drover.errors import DroverError, SessionBusyError
from drover.journal.protocol import Store
from drover.journal.records import GrantRecord, QueuedMessage, SessionRecord
from drover.runtime.hub import Hub
from drover.runtime.queue import QUEUE_EVENTS, IfBusy
from drover.runtime.runner import Runner
from drover.runtime.turns import FollowUp, RunningTurn
from drover.server.snapshot import snapshot
from drover.server.webhooks import Targets
from drover.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

#: ``(session_ids) -> {session_id: turn_id}`` of those with a turn running in any process.
RunningAnywhere = Callable[[list[str]], Awaitable[dict[str, str]]]

DEFAULT_PERMISSION_TIMEOUT = 300.0
#: The recorded error of a turn interrupted because the server stopped.
SERVER_STOPPED = "interrupted: drover serve stopped while the turn ran"


class NotFoundError(DroverError):
    """No such session (or not this client's)."""


class NoRunningTurnError(DroverError):
    """Nothing to interrupt."""


class WebhookRefused(DroverError):
    """A message named a webhook this server does not deliver to."""


class Service:
    def __init__(
        self,
        *,
        agent: Agent,
        hub: Hub,
        permission_timeout: float = DEFAULT_PERMISSION_TIMEOUT,
        running_elsewhere: RunningElsewhere | None = None,
        send_control: SendControl | None = None,
        relay: Relay | None = None,
        running_anywhere: RunningAnywhere | None = None,
        metrics: Metrics | None = None,
        webhooks: Targets | None = None,
    ) -> None:
        """``running_elsewhere`` and ``send_control`` (several processes on one journal) reach
        the process running a session's turn when it is not this one. ``metrics``: what
        ``GET /metrics`` serves (None: the route answers 404). ``webhooks`` says which URLs a
        posted message may name as its turn's webhook (None: none). The agent's runner is
        wired to ``hub`` (and ``relay``) here: its events, recoveries and idle sessions."""
        self.agent = agent
        self.hub = hub
        self.permission_timeout = permission_timeout
        self._elsewhere = running_elsewhere
        self._send_control = send_control
        self._anywhere = running_anywhere
        #: Carries other processes' live events to this one's clients (None: one process).
        self.relay = relay
        self.metrics = metrics
        self.webhooks = webhooks
        # The runner's events go to this process's clients (and, with a relay, to the other
        # processes'); a session's feed goes once no turn of it runs here and nobody reads.
        runner = self.runner
        if relay is None:
            runner.on_event = hub.publish
            runner.on_recovered = functools.partial(hub.resync, drop_ring=True)
        else:
            runner.on_event = relay.publish
            runner.on_recovered = relay.nudge
        runner.on_idle = hub.forget_idle
        #: Stops turns other processes run, for messages that interrupt or roll them back.
        self._stops: RemoteStops | None = None
        if send_control is not None:
            self.runner.queue.forward = self._announce_elsewhere
            if running_elsewhere is not None:
                self._stops = RemoteStops(self.runner, running_elsewhere, send_control)

    @property
    def store(self) -> Store:
        return self.agent.store

    @property
    def runner(self) -> Runner:
        return self.agent.runner

    # -- sessions ------------------------------------------------------------------------------

    async def create_session(self, owner: str | None) -> SessionRecord:
        return (await self.agent.session(owner=owner)).record

    async def open_session(self, session_id: str, owner: str | None) -> SessionRecord:
        """The session under an id the client chose: created for ``owner`` when new — its
        row carries its owner from its insert, so a request racing this one for the same id
        gets the one session and its real owner — or the stored one when it is ``owner``'s;
        :class:`NotFoundError` when it is another's (as for any foreign session)."""
        record = (await self.agent.session(session_id, owner=owner)).record
        if owner is not None and record.owner != owner:
            raise NotFoundError(f"no session {session_id}")
        return record

    async def session(self, session_id: str, owner: str | None) -> SessionRecord:
        """The session, when it exists and belongs to ``owner`` (None: no tokens in use)."""
        record = await self.store.get_session(session_id)
        if record is None or (owner is not None and record.owner != owner):
            raise NotFoundError(f"no session {session_id}")
        return record

    async def rename(self, record: SessionRecord, title: str) -> SessionRecord:
        await self.store.rename_session(record.id, title)
        return await self.store.get_session(record.id) or record

    async def delete(self, record: SessionRecord) -> None:
        """Delete the session (:meth:`drover.agent.agent.Agent.delete_session`), refused with
        :class:`~drover.errors.SessionBusyError` while a turn of it runs in any process; its
        followers' streams here end (they reconnect to a 404)."""
        running = await self.any_running_turn_id(record.id)
        if running is not None:
            raise SessionBusyError(record.id, running)
        await self.agent.delete_session(record.id)
        self.hub.drop(record.id)

    async def fork(self, record: SessionRecord, turn_id: str | None) -> SessionRecord:
        """A new session (the same owner's) with ``record``'s history up to ``turn_id``."""
        forked = await self.agent.fork(record.id, turn_id=turn_id, owner=record.owner)
        return forked.record

    async def rewind(
        self, record: SessionRecord, turn_id: str, *, files: bool, force: bool, dry_run: bool
    ) -> RewindPlan | RewindResult:
        """Rewind the session to before ``turn_id`` (:meth:`drover.agent.agent.Agent.rewind`), or
        with ``dry_run`` say what that would do; refused with
        :class:`~drover.errors.SessionBusyError` while a turn of it runs in any process."""
        running = await self.any_running_turn_id(record.id)
        if running is not None:
            raise SessionBusyError(record.id, running)
        if dry_run:
            return await self.agent.plan_rewind(record.id, turn_id)
        # (the handle's questions go to this server's clients: messages queued while the
        # rewind held the session run once it is done)
        await self._handle(record)
        return await self.agent.rewind(record.id, turn_id, files=files, force=force)

    async def list_sessions(self, owner: str | None, limit: int) -> list[SessionRecord]:
        return await self.store.list_sessions(limit, owner=owner)

    def running_turn_id(self, session_id: str) -> str | None:
        running = self.runner.running(session_id)
        return None if running is None else running.turn_id

    async def running_turn_ids(self, session_ids: list[str]) -> dict[str, str]:
        """``{session_id: turn_id}`` of the sessions with a running turn, in any process."""
        found = {} if self._anywhere is None else await self._anywhere(session_ids)
        for session_id in session_ids:
            local = self.running_turn_id(session_id)
            if local is not None:
                found[session_id] = local
        return found

    async def any_running_turn_id(self, session_id: str) -> str | None:
        """The running turn's id, whichever process runs it."""
        local = self.running_turn_id(session_id)
        if local is not None or self._elsewhere is None:
            return local
        found = await self._elsewhere(session_id)
        return None if found is None else found[0]

    def pending_permissions(self, session_id: str) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in event_to_dict(r).items() if k != "type"}
            for r in self.runner.open_requests(session_id)
        ]

    async def snapshot(self, record: SessionRecord) -> dict[str, Any]:
        snap = await snapshot(
            self.store,
            record,
            running_turn_id=self.running_turn_id(record.id),
            pending_permissions=self.pending_permissions(record.id),
        )
        if snap["running_turn_id"] is None:  # maybe running in another process
            running = [t["id"] for t in snap["turns"] if t["status"] == "running"]
            snap["running_turn_id"] = running[-1] if running else None
        return snap

    async def _handle(self, record: SessionRecord) -> Session:
        handle = await self.agent.session(record.id)
        handle.on_permission = functools.partial(self._expire, record.id)
        return handle

    # -- grants --------------------------------------------------------------------------------

    async def grants(self, record: SessionRecord) -> list[GrantRecord]:
        return await self.store.grants(record.id)

    async def revoke(self, record: SessionRecord, rule: str | None) -> list[str]:
        return await (await self._handle(record)).revoke(rule)

    # -- turns ---------------------------------------------------------------------------------

    async def post_message(
        self,
        record: SessionRecord,
        content: str | None,
        headers: Mapping[str, str] | None = None,
        *,
        webhook: str | None = None,
        if_busy: IfBusy = "reject",
    ) -> str | QueuedMessage:
        """Start a turn (``content=None``: resume the session's unfinished work); returns its
        id once the runner has recorded it — or, queued behind a running turn (``if_busy``,
        :meth:`drover.agent.session.Session.submit`), the queued message. With traces on, the trace
        context of ``headers`` (the request's ``traceparent``) is the parent of the turn's span.
        ``webhook`` (checked against :attr:`webhooks`: :class:`WebhookRefused` otherwise)
        replaces the server's for this turn."""
        if webhook is not None:
            if self.webhooks is None:
                raise WebhookRefused("this server delivers no webhooks (its operator enables them)")
            try:
                self.webhooks.allow(webhook)
            except DroverError as exc:
                raise WebhookRefused(str(exc)) from None
        handle = await self._handle(record)
        live = [_Transient(self.hub, record.id)]
        telemetry = self.agent.telemetry
        parent: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if telemetry is not None and headers is not None:
            parent = telemetry.parent_from(headers)
        with parent:  # (the turn's task copies the context it is started in)
            if content is None:
                running = handle.start(None, live=live, webhook=webhook)
                await running.wait_started()
            else:
                sent = await self._submit(handle, content, if_busy, live, webhook)
                if isinstance(sent, QueuedMessage):
                    return sent
                running = sent
        assert running.turn_id is not None
        return running.turn_id

    async def _submit(
        self,
        handle: Session[Any],
        content: str,
        if_busy: IfBusy,
        live: list[_Transient],
        webhook: str | None,
    ) -> RunningTurn | QueuedMessage:
        """:meth:`Session.submit`; with ``interrupt`` or ``rollback`` a turn another process
        runs is stopped first (:mod:`drover.cluster.remote_stop`), its work kept or discarded
        here before the message's turn starts — the session held from before the stop until
        that turn starts (:mod:`drover.runtime.holds`), so that nothing starts in between."""
        try:
            return await handle.submit(content, if_busy=if_busy, live=live, webhook=webhook)
        except SessionBusyError as busy:
            stops = self._stops
            if if_busy not in ("interrupt", "rollback") or stops is None or not busy.turn_id:
                raise
            refused, turn_id = busy, busy.turn_id
        async with self.runner.holds.hold(handle.id, after=turn_id) as token:
            if not await stops.stop(handle.id, turn_id):
                # Named: the turn that runs now, which may have started while this one stopped.
                now = await self.any_running_turn_id(handle.id)
                if now is not None and now != turn_id:
                    raise SessionBusyError(handle.id, now) from refused
                raise refused
            if if_busy == "rollback":
                await handle.discard()
            running = handle.start(content, live=live, webhook=webhook, hold=token)
            await running.wait_started()
            return running

    async def cancel_queued(self, record: SessionRecord, message_id: str) -> bool:
        """Cancel a queued message of the session; False when it is not queued (any more)."""
        return await (await self._handle(record)).cancel_queued(message_id)

    async def resume(self, session_id: str) -> str:
        """Continue a session a dead process left (a takeover): its next queued message's
        turn when it has one (its unfinished work goes first), else a turn that resumes the
        unfinished work."""
        queued = await self.start_queued(session_id)
        if queued is not None:
            return queued
        record = await self.store.get_session(session_id)
        if record is None:
            raise NotFoundError(f"no session {session_id}")
        started = await self.post_message(record, None)
        assert isinstance(started, str)
        return started

    async def start_queued(self, session_id: str) -> str | None:
        """Start the turn of the session's next queued message here; its id (None: nothing
        is queued, or a turn of the session runs)."""
        record = await self.store.get_session(session_id)
        if record is None:
            return None
        handle = await self._handle(record)
        live = (_Transient(self.hub, record.id),)
        then = FollowUp(handle.engine, live, handle.on_permission, None)
        running = await self.runner.queue.start_next(then)
        return None if running is None else running.turn_id

    async def run_waiting(self) -> list[str]:
        """Start the queues of sessions left with queued messages and no running turn (a
        process died between a turn's end and the next message's start); their ids."""
        started = []
        for session_id in await self.runner.queue.waiting():
            try:
                if await self.start_queued(session_id) is not None:
                    started.append(session_id)
            except DroverError as exc:  # busy (started meanwhile), closing…
                log.info("queue: session %s not started (%s)", session_id, exc)
        return started

    async def interrupt(self, session_id: str) -> str:
        turn_id = self.runner.interrupt(session_id)
        if turn_id is not None:
            return turn_id
        remote = await self._remote(session_id, {"op": "interrupt", "session": session_id})
        if remote is None:
            raise NoRunningTurnError(f"no turn is running on session {session_id}")
        return remote

    async def _remote(self, session_id: str, message: dict[str, Any]) -> str | None:
        """Send ``message`` to the process running the session's turn; that turn's id, or
        None when no other process runs one (or it cannot be reached)."""
        if self._elsewhere is None or self._send_control is None:
            return None
        found = await self._elsewhere(session_id)
        if found is None or found[1] is None or found[1] == self.runner.owner:
            return None
        turn_id, owner = found[0], found[1]
        return turn_id if await self._send_control(owner, message) else None

    async def _announce_elsewhere(self, session_id: str, event: dict[str, Any]) -> bool:
        """Give a queue's event to the process running the session's turn, to log."""
        message = {"op": "announce", "session": session_id, "event": event}
        return await self._remote(session_id, message) is not None

    async def on_control(self, message: dict[str, Any]) -> None:
        """A request another process received for a turn this one runs."""
        session_id = str(message.get("session", ""))
        event = message.get("event")
        if self._stops is not None and self._stops.on_control(message):
            return
        if message.get("op") == "interrupt":
            self.runner.interrupt(session_id)
        elif message.get("op") == "announce" and isinstance(event, dict):
            if event.get("type") in QUEUE_EVENTS:
                await self.runner.queue.announce(session_id, event)
        elif message.get("op") == "decide" and message.get("decision") in (
            "allow",
            "always",
            "deny",
        ):
            self.decide(session_id, str(message.get("request_id", "")), message["decision"])

    async def decide_anywhere(self, session_id: str, request_id: str, decision: Decision) -> bool:
        """Answer a permission request of a turn running here or in another process."""
        if self.decide(session_id, request_id, decision):
            return True
        if self.runner.running(session_id) is not None:
            return False
        message = {"op": "decide", "session": session_id, "request_id": request_id}
        return await self._remote(session_id, {**message, "decision": decision}) is not None

    async def shutdown(self, why: str = SERVER_STOPPED) -> None:
        """Interrupt every running turn (``why`` recorded as its error) and wait until each
        has recorded how it ended."""
        await self.runner.shutdown(why)

    # -- permissions ---------------------------------------------------------------------------

    def decide(self, session_id: str, request_id: str, decision: Decision) -> bool:
        return self.runner.decide(session_id, request_id, decision)

    async def _expire(self, session_id: str, request: PermissionRequest) -> Decision:
        """The server's permission handler: wait for any client's answer; with no client
        connected, deny after ``permission_timeout`` seconds."""
        feed = self.hub.feed(session_id)
        answered = asyncio.ensure_future(_answered(request.decision))
        try:
            while not answered.done():
                changed = asyncio.ensure_future(feed.wait_changed())
                timeout = None if feed.subscribers else self.permission_timeout
                done, _ = await asyncio.wait(
                    {answered, changed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                changed.cancel()
                if not done:
                    log.info("permission request %s timed out unanswered", request.request_id)
                    request.decide(
                        "deny",
                        reason="Not run: this call needs permission and no client of the server "
                        f"answered within {self.permission_timeout:g} s, so it was refused.",
                    )
                    return "deny"
        finally:
            answered.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answered
        decision = request.decision
        return "deny" if decision.cancelled() else decision.result()


class _Transient:
    """A live sink of a turn started here: its transient events (tool progress), which the
    journal neither numbers nor keeps, to the session's clients connected to this process."""

    def __init__(self, hub: Hub, session_id: str) -> None:
        self._hub = hub
        self._session_id = session_id
        self._turn_id: str | None = None

    async def send(self, event: Event) -> None:
        if isinstance(event, TurnStarted):
            self._turn_id = event.turn_id
        elif is_transient(event):
            self._hub.publish_transient(self._session_id, self._turn_id, event_to_dict(event))


async def _answered(decision: asyncio.Future[Decision]) -> None:
    await asyncio.wait({decision})
