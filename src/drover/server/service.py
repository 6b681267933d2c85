"""What the HTTP routes act on: sessions, the turns running on them, permission requests.

A posted message starts the turn as a task of the server's runner, not of the request, so the
turn outlives every client. One turn at a time per session: a second message while one runs is
refused with the running turn's id (:class:`~drover.errors.SessionBusyError`; the runner refuses
a turn another live process runs the same way). Interrupting cancels the task: the loop records
the work done so far and the turn ends ``interrupted``, resumable by the next message. Shutdown
interrupts every running turn the same way and waits for their records.

A permission request waits for an answer from any client. While no client is connected to the
session it waits at most ``permission_timeout`` seconds (counted again from the moment the last
client leaves); then it is answered ``deny``, and the tool call ends ``denied`` in the
transcript like any refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from drover.errors import DroverError, SessionBusyError
from drover.events import Decision, Event, PermissionRequest, TurnStarted, event_to_dict
from drover.permissions import PermissionMode, PermissionPolicy
from drover.runner import Runner
from drover.server.hub import Hub
from drover.server.relay import Relay
from drover.server.snapshot import snapshot
from drover.session import AgentSession
from drover.store.base import SessionRecord, Store

log = logging.getLogger(__name__)

SessionFactory = Callable[[SessionRecord, PermissionPolicy], Awaitable[AgentSession]]
#: ``(session_id) -> (turn_id, owner)`` of a turn running in any process, or None.
RunningElsewhere = Callable[[str], Awaitable[tuple[str, str | None] | None]]
#: ``(session_ids) -> {session_id: turn_id}`` of those with a turn running in any process.
RunningAnywhere = Callable[[list[str]], Awaitable[dict[str, str]]]
#: Sends a control message to the process ``owner``; False when it cannot be sent.
SendControl = Callable[[str, dict[str, Any]], Awaitable[bool]]

DEFAULT_PERMISSION_TIMEOUT = 300.0


class NotFoundError(DroverError):
    """No such session (or not this client's)."""


class NoRunningTurnError(DroverError):
    """Nothing to interrupt."""


@dataclass(eq=False)
class _Running:
    started: asyncio.Future[str]
    task: asyncio.Task[None] | None = None
    turn_id: str | None = None
    requests: dict[str, PermissionRequest] = field(default_factory=dict)
    watchers: set[asyncio.Task[None]] = field(default_factory=set)


class _LiveSink:
    """The runner's live consumer for one turn: its id and its permission requests."""

    def __init__(self, service: Service, session_id: str, running: _Running) -> None:
        self._service = service
        self._session_id = session_id
        self._running = running

    async def send(self, event: Event) -> None:
        if isinstance(event, TurnStarted):
            self._running.turn_id = event.turn_id
            if not self._running.started.done():
                self._running.started.set_result(event.turn_id)
        elif isinstance(event, PermissionRequest):
            self._service.hold_request(self._session_id, self._running, event)


class Service:
    def __init__(
        self,
        *,
        store: Store,
        runner: Runner,
        hub: Hub,
        new_session: SessionFactory,
        workdir: str,
        model: str,
        permission_mode: PermissionMode = "ask",
        permission_timeout: float = DEFAULT_PERMISSION_TIMEOUT,
        running_elsewhere: RunningElsewhere | None = None,
        send_control: SendControl | None = None,
        relay: Relay | None = None,
        running_anywhere: RunningAnywhere | None = None,
    ) -> None:
        """``running_elsewhere`` and ``send_control`` (several processes on one journal) reach
        the process running a session's turn when it is not this one."""
        self.store = store
        self.runner = runner
        self.hub = hub
        self._new_session = new_session
        self._workdir = workdir
        self._model = model
        self._mode: PermissionMode = permission_mode
        self.permission_timeout = permission_timeout
        self._running: dict[str, _Running] = {}
        self._policies: dict[str, PermissionPolicy] = {}
        self._closing = False
        self._elsewhere = running_elsewhere
        self._send_control = send_control
        self._anywhere = running_anywhere
        #: Carries other processes' live events to this one's clients (None: one process).
        self.relay = relay

    # -- sessions ------------------------------------------------------------------------------

    async def create_session(self, owner: str | None) -> SessionRecord:
        return await self.store.create_session(
            workdir=self._workdir, model=self._model, owner=owner
        )

    async def session(self, session_id: str, owner: str | None) -> SessionRecord:
        """The session, when it exists and belongs to ``owner`` (None: no tokens in use)."""
        record = await self.store.get_session(session_id)
        if record is None or (owner is not None and record.owner != owner):
            raise NotFoundError(f"no session {session_id}")
        return record

    async def list_sessions(self, owner: str | None, limit: int) -> list[SessionRecord]:
        return await self.store.list_sessions(limit, owner=owner)

    def running_turn_id(self, session_id: str) -> str | None:
        running = self._running.get(session_id)
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
        running = self._running.get(session_id)
        if running is None:
            return []
        return [
            {k: v for k, v in event_to_dict(r).items() if k != "type"}
            for r in running.requests.values()
            if not r.decision.done()
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

    # -- turns ---------------------------------------------------------------------------------

    async def post_message(self, record: SessionRecord, content: str | None) -> str:
        """Start a turn (``content=None``: resume the session's unfinished work); returns its
        id once the runner has recorded it."""
        if self._closing:
            raise DroverError("the server is shutting down")
        busy = self._running.get(record.id)
        if busy is not None:
            raise SessionBusyError(record.id, busy.turn_id or "")
        running = _Running(started=asyncio.get_running_loop().create_future())
        self._running[record.id] = running  # before any await: a second post sees it
        try:
            session = await self._new_session(record, self._policy(record.id))
        except BaseException:
            del self._running[record.id]
            raise
        sink = _LiveSink(self, record.id, running)
        running.task = asyncio.get_running_loop().create_task(
            self._run(record.id, session, content, sink, running)
        )
        waiting: set[asyncio.Future[Any]] = {running.started, running.task}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if running.started.done():
            return running.started.result()
        running.task.result()  # raises why the turn could not start
        raise DroverError("the turn ended before it started")

    async def resume(self, session_id: str) -> str:
        """Resume a session's unfinished work as a new turn (a takeover's continuation)."""
        record = await self.store.get_session(session_id)
        if record is None:
            raise NotFoundError(f"no session {session_id}")
        return await self.post_message(record, None)

    async def _run(
        self,
        session_id: str,
        session: AgentSession,
        content: str | None,
        sink: _LiveSink,
        running: _Running,
    ) -> None:
        try:
            await self.runner.run(session, content, live=[sink])
        except asyncio.CancelledError:
            pass  # interrupted: the loop recorded the work and the terminal event
        except SessionBusyError:
            raise
        except Exception:
            if running.started.done():
                log.exception("turn %s on session %s failed", running.turn_id, session_id)
            else:
                raise
        finally:
            for watcher in running.watchers:
                watcher.cancel()
            if self._running.get(session_id) is running:
                del self._running[session_id]
            self.hub.forget_idle(session_id)

    async def interrupt(self, session_id: str) -> str:
        running = self._running.get(session_id)
        if running is None or running.task is None or running.turn_id is None:
            remote = await self._remote(session_id, {"op": "interrupt", "session": session_id})
            if remote is None:
                raise NoRunningTurnError(f"no turn is running on session {session_id}")
            return remote
        running.task.cancel()
        return running.turn_id

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

    async def on_control(self, message: dict[str, Any]) -> None:
        """A request another process received for a turn this one runs."""
        session_id = str(message.get("session", ""))
        if message.get("op") == "interrupt":
            with contextlib.suppress(NoRunningTurnError):
                await self.interrupt_local(session_id)
        elif message.get("op") == "decide" and message.get("decision") in (
            "allow",
            "always",
            "deny",
        ):
            self.decide(session_id, str(message.get("request_id", "")), message["decision"])

    async def interrupt_local(self, session_id: str) -> str:
        running = self._running.get(session_id)
        if running is None or running.task is None or running.turn_id is None:
            raise NoRunningTurnError(f"no turn is running on session {session_id} here")
        running.task.cancel()
        return running.turn_id

    async def decide_anywhere(self, session_id: str, request_id: str, decision: Decision) -> bool:
        """Answer a permission request of a turn running here or in another process."""
        if self.decide(session_id, request_id, decision):
            return True
        if session_id in self._running:
            return False
        message = {"op": "decide", "session": session_id, "request_id": request_id}
        return await self._remote(session_id, {**message, "decision": decision}) is not None

    async def shutdown(self) -> None:
        """Interrupt every running turn and wait until each has recorded how it ended."""
        self._closing = True
        tasks = [r.task for r in self._running.values() if r.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _policy(self, session_id: str) -> PermissionPolicy:
        policy = self._policies.get(session_id)
        if policy is None:
            policy = self._policies[session_id] = PermissionPolicy(self._mode)
        return policy

    # -- permissions ---------------------------------------------------------------------------

    def decide(self, session_id: str, request_id: str, decision: Decision) -> bool:
        running = self._running.get(session_id)
        request = None if running is None else running.requests.pop(request_id, None)
        return request is not None and request.decide(decision)

    def hold_request(self, session_id: str, running: _Running, request: PermissionRequest) -> None:
        running.requests[request.request_id] = request
        watcher = asyncio.get_running_loop().create_task(self._expire(session_id, request))
        running.watchers.add(watcher)
        watcher.add_done_callback(running.watchers.discard)

    async def _expire(self, session_id: str, request: PermissionRequest) -> None:
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
                    running = self._running.get(session_id)
                    if running is not None:
                        running.requests.pop(request.request_id, None)
                    request.decide("deny")
                    return
        finally:
            answered.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answered


async def _answered(decision: asyncio.Future[Decision]) -> None:
    await asyncio.wait({decision})
