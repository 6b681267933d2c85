"""A stored session as every front door holds it: :class:`Session`, and a turn's :class:`RunResult`.

``agent.session(id)`` gives a :class:`Session`; the library, ``-p``, the REPL and ``drover
serve`` all run turns through it. It holds the session's conversation as loaded from the
journal (committed history and pending work), its permission policy (mode and the grants kept
in the journal) and its permission handler, and starts each turn through the agent's runner,
which records it, renews its lease and ends it truthfully.

Each turn may be given ``deps`` (what its tools see as ``ctx.deps``) and an ``output_type``
(a pydantic model its final answer must be JSON of; the session's default is the agent's).
Neither is journaled: a resumed turn gets what its own call passes. A :class:`RunResult` is
generic in its ``output``: ``RunResult[str]`` (the answer's text) for a turn without an
``output_type``, ``RunResult[MyModel]`` for one with it.

A session handle belongs to the agent that made it and to one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, overload

from pydantic import BaseModel

from drover.agent.result import (
    TERMINAL_TYPES,
    OutputT,
    RunOutputT,
    RunResult,
    output_schema,
    result_of,
    terminal_event,
)
from drover.core.events import (
    Decision,
    PermissionRequest,
)
from drover.core.messages import Message, Prompt, refuse_unsendable
from drover.core.output import OutputSchema
from drover.core.sinks import EventSink
from drover.errors import DroverError, SessionBusyError
from drover.journal.protocol import Store
from drover.journal.records import GrantRecord, QueuedMessage, SessionRecord
from drover.runtime.queue import WATCH_EVERY, IfBusy
from drover.runtime.runner import Runner
from drover.runtime.turns import FollowUp, PermissionHandler, RunningTurn
from drover.turn.loop import TurnOptions
from drover.turn.state import AgentSession

if TYPE_CHECKING:
    from drover.agent.rewind import RewindResult
    from drover.agent.turn_stream import TurnStream

log = logging.getLogger(__name__)

#: What the model is told of a call refused because the run had nobody to ask.
NO_HANDLER_TEXT = (
    "Not run: this call needs permission and the run had no permission handler to ask, so it "
    "was refused without asking."
)


def deny_unanswered(request: PermissionRequest) -> Decision:
    """The handler of a turn nobody can be asked in: refuse, saying so."""
    request.decide("deny", reason=NO_HANDLER_TEXT)
    return "deny"


class SessionOwner(Protocol):
    """What a session handle needs of the agent that made it."""

    @property
    def runner(self) -> Runner: ...

    @property
    def store(self) -> Store: ...

    async def switch_model(self, session: Session[Any], model: str) -> None: ...

    async def fork(
        self, session_id: str, *, turn_id: str | None = None, owner: str | None = None
    ) -> Session[Any]: ...

    async def rewind(
        self, session_id: str, turn_id: str, *, files: bool = True, force: bool = False
    ) -> RewindResult: ...

    def model_of(self, session: Session[Any]) -> str: ...


class Session(Generic[OutputT]):
    """A stored session; see the module docstring."""

    def __init__(
        self,
        agent: SessionOwner,
        record: SessionRecord,
        engine: AgentSession,
        *,
        created: bool,
        on_permission: PermissionHandler | None,
        output: OutputSchema[Any] | None = None,
    ) -> None:
        self._agent = agent
        self.record = record
        #: The conversation and its turn machinery (front doors use it directly).
        self.engine = engine
        #: True when opening it created it (it was not in the journal before).
        self.created = created
        #: Answers this session's permission questions (None: a live reader of the turn
        #: answers them, e.g. with ``request.decide``; ``run`` denies what nobody answers).
        self.on_permission = on_permission
        #: The output schema of turns given no ``output_type`` (None: free text).
        self.output = output

    @property
    def id(self) -> str:
        return self.engine.id

    @property
    def pending(self) -> tuple[Message, ...]:
        """Work of unfinished turns, placed before the next message (empty: none)."""
        return self.engine.pending

    @property
    def history(self) -> tuple[Message, ...]:
        """Committed history followed by pending work: what the next request starts from."""
        return self.engine.history()

    @property
    def running(self) -> RunningTurn | None:
        """This session's turn running in this process, if any."""
        return self._agent.runner.running(self.id)

    # -- turns ---------------------------------------------------------------------------------

    def start(
        self,
        prompt: Prompt | None,
        *,
        live: Sequence[EventSink] = (),
        on_permission: PermissionHandler | None = None,
        deps: object = None,
        output_type: type[BaseModel | str] | None = None,
        webhook: str | None = None,
        follow: bool = True,
        hold: str | None = None,
    ) -> RunningTurn:
        """Start a turn (``prompt=None`` resumes) in a task that outlives the caller; see
        :meth:`drover.runtime.runner.Runner.start`. ``on_permission`` overrides the session's;
        ``deps`` reach its tools as ``ctx.deps``; ``output_type`` overrides the session's;
        ``webhook`` (a URL) is where the turn's end is announced (see
        :mod:`drover.server.webhooks`). ``follow=False``: the session's queued messages do not
        run after it on their own (the caller runs them, :meth:`start_queued`). ``hold``: the
        token of this process's hold on the session (:mod:`drover.runtime.holds`), which the
        turn takes over as it starts.

        A blank prompt (empty or white space only, no image) raises
        :class:`~drover.errors.BlankPromptError` (a ``ValueError``) before anything starts."""
        if prompt is not None:
            refuse_unsendable(prompt)
        output = self.output if output_type is None else output_schema(output_type)
        return self._agent.runner.start(
            self.engine,
            prompt,
            live,
            on_permission=on_permission or self.on_permission,
            options=TurnOptions(deps=deps, output=output),
            webhook=webhook,
            follow=follow,
            hold=hold,
        )

    async def submit(
        self,
        prompt: Prompt,
        *,
        if_busy: IfBusy = "reject",
        live: Sequence[EventSink] = (),
        on_permission: PermissionHandler | None = None,
        deps: object = None,
        output_type: type[BaseModel | str] | None = None,
        follow: bool = True,
        webhook: str | None = None,
    ) -> RunningTurn | QueuedMessage:
        """Send ``prompt`` whether or not a turn of the session runs: :meth:`start` it, or
        as ``if_busy`` says when one runs (:data:`~drover.runtime.queue.IfBusy`). Gives the
        started turn once recorded, or with ``enqueue`` while a turn runs the
        :class:`~drover.journal.records.QueuedMessage` (its turn starts when the session is
        free, with the live sinks, handler and options of the turn before it). ``interrupt``
        and ``rollback`` act on a turn running in this process; one running in another
        process is refused as with ``reject`` (``drover serve`` asks that process to stop it,
        :mod:`drover.cluster.remote_stop`). ``follow=False``: queued messages do not run
        after this turn (the caller runs them, :meth:`start_queued`). A blank prompt is
        refused first, as by :meth:`start`: a running turn is not interrupted for it."""
        refuse_unsendable(prompt)

        def begin(hold: str | None = None) -> RunningTurn:
            return self.start(
                prompt,
                live=live,
                on_permission=on_permission,
                deps=deps,
                output_type=output_type,
                follow=follow,
                webhook=webhook,
                hold=hold,
            )

        runner = self._agent.runner
        busy = self.running
        if if_busy in ("interrupt", "rollback") and busy is not None:
            return await self._replace(busy, if_busy == "rollback", begin)
        if if_busy == "enqueue":
            if busy is None and not await self.queued():
                try:
                    running = begin()
                    await running.wait_started()
                    return running
                except SessionBusyError:
                    pass  # running in another process: queue it
            if not isinstance(prompt, str):
                raise DroverError("a message with images cannot be queued: send it once idle")
            message = await runner.queue.enqueue(self.id, prompt, webhook=webhook)
            if self.running is None:  # nothing here will run it after a turn: start it now
                then = FollowUp(
                    self.engine,
                    tuple(live),
                    on_permission or self.on_permission,
                    TurnOptions(deps=deps, output=output_schema(output_type) or self.output),
                    follow=follow,
                )
                started = await runner.queue.start_next(then)
                if started is not None and started.claim == message.id:
                    return started
            return message
        running = begin()
        await running.wait_started()
        return running

    async def _replace(
        self, busy: RunningTurn, discard: bool, begin: Callable[[str], RunningTurn]
    ) -> RunningTurn:
        """Stop ``busy`` (its work kept, or with ``discard`` discarded) and start the new
        message's turn (``begin`` with the hold's token), the session held from before the
        stop until that turn starts: nothing else starts in between, in any process (the
        takeover's sweep would start a queued message, with the work a rollback drops). When
        the new turn does not start (refused, cancelled), the session's queue runs as after
        the stopped turn."""
        if busy.turn_id is None:
            with contextlib.suppress(Exception):  # (it could not start: nothing to stop)
                await busy.wait_started()
        runner = self._agent.runner
        then, started = busy.then, False
        try:
            async with runner.holds.hold(self.id, after=busy.turn_id) as token:
                busy.then = None  # the new message goes first; the queue runs after it
                busy.interrupt()
                await busy.finished()
                if discard:
                    await runner.discard_pending(self.engine)
                running = begin(token)
                await running.wait_started()
                started = True
                return running
        finally:
            if not started and then is not None:
                runner.queue.follow(then)

    async def start_queued(
        self, *, live: Sequence[EventSink] = (), on_permission: PermissionHandler | None = None
    ) -> RunningTurn | None:
        """Start the turn of the session's next queued message (None: none is queued, or a
        turn of the session runs); queued messages after it do not follow on their own."""
        then = FollowUp(
            self.engine, tuple(live), on_permission or self.on_permission, None, follow=False
        )
        return await self._agent.runner.queue.start_next(then)

    async def queued(self) -> list[QueuedMessage]:
        """The messages waiting for the session's turn to end, in order."""
        return await self._agent.store.queued_messages(self.id)

    async def cancel_queued(self, message_id: str) -> bool:
        """Cancel a queued message (kept in the journal, marked); False when it is not
        queued any more (it ran, or was cancelled)."""
        return await self._agent.runner.queue.cancel(self.id, message_id)

    @overload
    async def run(
        self,
        prompt: Prompt,
        *,
        live: Sequence[EventSink] = ...,
        deps: object = ...,
        output_type: None = ...,
        if_busy: IfBusy = ...,
    ) -> RunResult[OutputT]: ...

    @overload
    async def run(
        self,
        prompt: Prompt,
        *,
        live: Sequence[EventSink] = ...,
        deps: object = ...,
        output_type: type[RunOutputT],
        if_busy: IfBusy = ...,
    ) -> RunResult[RunOutputT]: ...

    async def run(
        self,
        prompt: Prompt,
        *,
        live: Sequence[EventSink] = (),
        deps: object = None,
        output_type: type[Any] | None = None,
        if_busy: IfBusy = "reject",
    ) -> RunResult[Any]:
        """Run one turn for ``prompt`` (pending work goes before it). Cancelling the call
        interrupts the turn; its work stays pending in the journal. ``deps`` reach the
        tools as ``ctx.deps``; ``output_type`` (a pydantic model) makes ``result.output``
        the validated final answer. While a turn of the session runs, ``if_busy`` says what
        happens (:meth:`submit`); with ``enqueue`` the call returns the result of the
        message's own turn, once it ran."""
        if if_busy == "reject":
            return await self._run(prompt, live, deps, output_type)
        handler = self.on_permission or deny_unanswered
        # (where the log stands: a queued message's turn another process runs ends after it)
        logged = await self._agent.store.last_event_seq(self.id) if if_busy == "enqueue" else 0
        sent = await self.submit(
            prompt,
            if_busy=if_busy,
            live=live,
            on_permission=handler,
            deps=deps,
            output_type=output_type,
        )
        if isinstance(sent, QueuedMessage):
            message_id = sent.id
            try:
                ran = await self._agent.runner.queue.turn_of(self.id, message_id)
            except asyncio.CancelledError:
                # The caller gave up before the message ran: it does not run later.
                await self.cancel_queued(message_id)
                raise
            if isinstance(ran, str):
                return await self._ended_elsewhere(ran, logged)
            sent = ran
        return await self._finish(sent)

    async def _ended_elsewhere(self, turn_id: str, logged: int) -> RunResult[Any]:
        """The result of the turn another process runs for this session (a queued message
        of this caller's), read from the journal once the turn ended there — or was ended by
        the recovery of its process's death; ``logged``: an event number before its start."""
        runner, store = self._agent.runner, self._agent.store
        while (turn := await store.get_turn(turn_id)) is None or turn.status == "running":
            await asyncio.sleep(WATCH_EVERY)
            await runner.recover(self.id)
        ends = [
            e
            for e in await store.events_after(self.id, logged)
            if e.turn_id == turn_id and e.type in TERMINAL_TYPES
        ]
        if not ends:
            raise DroverError(f"turn {turn_id} ended without a terminal event in the journal")
        if runner.running(self.id) is None:  # (never under a turn running here)
            await runner.reload(self.engine)
        return result_of(self.engine, turn_id, terminal_event(ends[-1].payload))

    @overload
    async def resume(
        self, *, live: Sequence[EventSink] = ..., deps: object = ..., output_type: None = ...
    ) -> RunResult[OutputT]: ...

    @overload
    async def resume(
        self, *, live: Sequence[EventSink] = ..., deps: object = ..., output_type: type[RunOutputT]
    ) -> RunResult[RunOutputT]: ...

    async def resume(
        self,
        *,
        live: Sequence[EventSink] = (),
        deps: object = None,
        output_type: type[Any] | None = None,
    ) -> RunResult[Any]:
        """Finish the session's unfinished turn without a new instruction (with these
        ``deps`` and ``output_type``: the first run's are not kept)."""
        return await self._run(None, live, deps, output_type)

    async def _run(
        self,
        prompt: Prompt | None,
        live: Sequence[EventSink],
        deps: object,
        output_type: type[BaseModel | str] | None,
    ) -> RunResult[Any]:
        running = self.start(
            prompt,
            live=live,
            on_permission=self.on_permission or deny_unanswered,
            deps=deps,
            output_type=output_type,
        )
        return await self._finish(running)

    async def _finish(self, running: RunningTurn) -> RunResult[Any]:
        """The result of a started turn; cancelling the wait interrupts it."""
        assert running.task is not None
        try:
            outcome = await asyncio.shield(running.task)
        except BaseException:
            if not running.task.done():
                running.interrupt()
                await running.finished()
            raise
        return result_of(self.engine, outcome.turn_id, outcome.event)

    @overload
    def run_stream(
        self, prompt: Prompt | None = ..., *, deps: object = ..., output_type: None = ...
    ) -> TurnStream[OutputT]: ...

    @overload
    def run_stream(
        self, prompt: Prompt | None = ..., *, deps: object = ..., output_type: type[RunOutputT]
    ) -> TurnStream[RunOutputT]: ...

    def run_stream(
        self,
        prompt: Prompt | None = None,
        *,
        deps: object = None,
        output_type: type[Any] | None = None,
    ) -> TurnStream[Any]:
        """A turn's events as they happen (``prompt=None`` resumes), as a context manager::

            async with session.run_stream("fix the test") as stream:
                async for event in stream:
                    ...
            print(stream.result.status)

        Leaving the block before the turn ended (``break``, an exception, cancellation)
        interrupts the turn at once and waits until its work is recorded: the session is then
        free and resumable."""
        from drover.agent.turn_stream import TurnStream

        return TurnStream(self, prompt, deps=deps, output_type=output_type)

    # -- pending work and grants ---------------------------------------------------------------

    async def discard(self) -> int:
        """Drop the unfinished work (the journal keeps it, marked discarded); how many
        messages were dropped."""
        if self.running is not None:
            raise SessionBusyError(self.id, self.running.turn_id or "")
        dropped = len(self.engine.pending)
        await self._agent.runner.discard_pending(self.engine)
        return dropped

    async def fork(self, turn_id: str | None = None) -> Session[OutputT]:
        """A new session whose history is this one's up to and including ``turn_id`` (None:
        all of it); see :meth:`drover.agent.agent.Agent.fork`."""
        return await self._agent.fork(self.id, turn_id=turn_id, owner=self.record.owner)

    async def rewind(
        self, turn_id: str, *, files: bool = True, force: bool = False
    ) -> RewindResult:
        """Undo ``turn_id`` and every later turn (and, with ``files``, what they wrote to
        files); see :meth:`drover.agent.agent.Agent.rewind`."""
        return await self._agent.rewind(self.id, turn_id, files=files, force=force)

    async def grants(self) -> list[GrantRecord]:
        """What the user allowed "always" in this session (kept in the journal)."""
        return await self._agent.store.grants(self.id)

    async def revoke(self, rule: str | None = None) -> list[str]:
        """Withdraw one grant (``rule``) or all; the rules withdrawn. A turn running here stops
        using them at once, one running in another process from its next turn."""
        revoked = await self._agent.store.revoke_grants(self.id, rule)
        self.engine.policy.revoke(rule)
        return revoked

    async def switch_model(self, model: str) -> None:
        """Use ``model`` (``PROVIDER:MODEL``) from the next turn on; pending work is kept and
        converted. When the new provider cannot be built the old one stays in use."""
        await self._agent.switch_model(self, model)

    @property
    def model(self) -> str:
        """The ``PROVIDER:MODEL`` (or bare model name) this session's turns use."""
        return self._agent.model_of(self)
