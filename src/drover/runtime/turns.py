"""A turn running in this process, as the runner and the front doors hold it.

:class:`RunningTurn` is the handle a front door gets from
:meth:`~drover.runtime.runner.Runner.start`: the turn's task, its id once the journal recorded its
start, its open permission questions, and how to stop it. :class:`TurnWatcher` is the runner's own
live sink of a turn, which fills that handle in from the turn's events and hands permission
questions to the session's handler. :class:`FollowUp` says how a session's queued messages are run
once the turn ends.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from drover.core.events import (
    Decision,
    Event,
    PermissionRequest,
    TerminalEvent,
    TurnStarted,
    is_terminal,
)
from drover.core.sinks import EventSink
from drover.errors import DroverError
from drover.turn.loop import TurnControl, TurnOptions
from drover.turn.state import AgentSession, TurnOutcome

if TYPE_CHECKING:
    from drover.journal.journal import Journal

log = logging.getLogger(__name__)

#: Answers a permission question: ``"allow"``, ``"always"`` or ``"deny"`` (sync or async).
PermissionHandler = Callable[[PermissionRequest], Decision | Awaitable[Decision]]


@dataclass(frozen=True, slots=True)
class FollowUp:
    """How the turns of a session's queued messages are started after a turn: with the live
    sinks, permission handler and options the ended turn had."""

    session: AgentSession
    live: Sequence[EventSink]
    on_permission: PermissionHandler | None
    options: TurnOptions | None
    #: Whether the queued message's turn runs the rest of the queue after it.
    follow: bool = True


@dataclass(eq=False)
class RunningTurn:
    """A turn running in this process."""

    session_id: str
    #: Resolves to the turn's id once the journal recorded its start (or to why it could not
    #: start).
    started: asyncio.Future[str]
    #: Permission questions waiting for an answer, by request id.
    requests: dict[str, PermissionRequest] = field(default_factory=dict)
    task: asyncio.Task[TurnOutcome] | None = None
    #: Lets the runner stop the turn; :meth:`interrupt` tells it why.
    control: TurnControl = field(default_factory=TurnControl)
    #: The terminal event, once emitted.
    end: TerminalEvent | None = None
    #: The queued message the turn runs (None: a message given directly, or a resume).
    claim: str | None = None
    #: The token of the hold on the session the turn takes over as it starts (see
    #: :mod:`drover.runtime.holds`).
    hold: str | None = None
    #: What runs the session's queued messages once this turn ends (None: nothing; the
    #: front door does, or the next message must come first).
    then: FollowUp | None = None
    #: The turn's journal, once the turn is recorded (a queue's event is logged through it).
    journal: Journal | None = None
    _helpers: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def turn_id(self) -> str | None:
        done = self.started.done() and not self.started.cancelled()
        return self.started.result() if done and self.started.exception() is None else None

    async def wait_started(self) -> str:
        """The turn's id once recorded; raises why it could not start."""
        assert self.task is not None
        waiting: set[asyncio.Future[Any]] = {self.started, self.task}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if self.started.done() and self.started.exception() is None:
            return self.started.result()
        self.task.result()  # raises why the turn could not start
        raise DroverError("the turn ended before it started")

    def interrupt(self, why: str | None = None) -> None:
        """Stop the turn: the loop records its work and ends it ``interrupted``, with ``why``
        as its error when it was not the user's doing (a signal, a shutdown); the first reason
        given stands."""
        if why is not None and self.control.interruption is None:
            self.control.interruption = why
        if self.task is not None:
            self.task.cancel()

    async def finished(self) -> None:
        """Until the turn's task is over, whatever ended it (never raises)."""
        if self.task is not None:
            await asyncio.wait([self.task])

    def open_requests(self) -> list[PermissionRequest]:
        return [r for r in self.requests.values() if not r.decision.done()]

    def cancel_helpers(self) -> None:
        """Stop the permission handlers still asking (the turn is over)."""
        for helper in tuple(self._helpers):
            helper.cancel()


class TurnWatcher:
    """The runner's own live sink of a turn: its id, its end and its permission questions."""

    def __init__(self, running: RunningTurn, handler: PermissionHandler | None) -> None:
        self._running = running
        self._handler = handler

    async def send(self, event: Event) -> None:
        running = self._running
        if isinstance(event, TurnStarted):
            if not running.started.done():
                running.started.set_result(event.turn_id)
        elif isinstance(event, PermissionRequest):
            running.requests[event.request_id] = event
            event.decision.add_done_callback(lambda _: running.requests.pop(event.request_id, None))
            if self._handler is not None:
                helper = asyncio.get_running_loop().create_task(self._ask(self._handler, event))
                running._helpers.add(helper)
                helper.add_done_callback(running._helpers.discard)
        elif is_terminal(event):
            running.end = event  # type: ignore[assignment]

    @staticmethod
    async def _ask(handler: PermissionHandler, request: PermissionRequest) -> None:
        decision: Decision = "deny"
        reason = None
        try:
            answer = handler(request)
            if inspect.isawaitable(answer):
                answer = await answer
            if answer in ("allow", "always", "deny"):
                decision = answer
            else:
                log.warning("permission handler returned %r; denying", answer)
                reason = f"Not run: the permission handler gave no answer ({answer!r})."
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("permission handler failed; denying %s", request.tool_name)
            reason = f"Not run: the permission handler failed ({type(exc).__name__})."
        request.decide(decision, reason=reason)
