"""A turn's events as they happen: :class:`TurnStream`, the context manager of ``run_stream``.

An async generator cannot promise anything about the turn behind it: a reader that leaves the
loop early (``break``) leaves the generator suspended until the garbage collector closes it,
and the turn meanwhile goes on — it makes another model call, keeps the session busy, and
answers a ``resume`` with "nothing to resume". A context manager can: leaving its block ends
the turn there and then::

    async with agent.run_stream("fix the test") as stream:
        async for event in stream:
            if isinstance(event, TextDelta):
                print(event.text, end="")
    print(stream.result.status)

Entering starts the turn (in a task of its own, through the runner); iterating yields its
events, the terminal one last; leaving before the terminal event — ``break``, ``return``, an
exception, cancellation or :meth:`TurnStream.cancel` — interrupts the turn and waits until its
work is recorded, so the session is free and resumable as soon as the block is left. A slow
reader may miss text deltas (the finished message carries the text), never a tool state, a
permission question or the terminal event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Generic, Protocol

from pydantic import BaseModel

from drover.agent.result import OutputT, RunResult, result_of
from drover.core.events import Event, is_terminal
from drover.core.messages import Prompt, refuse_unsendable
from drover.core.sinks import EventChannel, EventSink
from drover.errors import DroverError
from drover.runtime.turns import RunningTurn
from drover.turn.state import AgentSession


class TurnSource(Protocol):
    """What a stream starts its turn on: a session handle
    (:class:`drover.agent.session.Session`).
    """

    @property
    def id(self) -> str: ...

    @property
    def engine(self) -> AgentSession: ...

    def start(
        self,
        prompt: Prompt | None,
        *,
        live: Sequence[EventSink] = (),
        deps: object = None,
        output_type: type[BaseModel | str] | None = None,
    ) -> RunningTurn: ...


class TurnStream(Generic[OutputT]):
    """See the module docstring. Permission questions go to the session's handler when it has
    one; otherwise the reader answers them with ``request.decide(...)``. ``deps`` and
    ``output_type`` are the turn's (see :meth:`drover.agent.session.Session.run`)."""

    def __init__(
        self,
        session: TurnSource | None,
        prompt: Prompt | None,
        *,
        deps: object = None,
        output_type: type[BaseModel | str] | None = None,
    ) -> None:
        if prompt is not None:  # refused here, not when the block is entered
            refuse_unsendable(prompt)
        self._session = session
        self._prompt = prompt
        self._deps = deps
        self._output_type = output_type
        self._channel = EventChannel()
        self._running: RunningTurn | None = None
        self._ended = False
        self._result: RunResult[OutputT] | None = None

    @property
    def session_id(self) -> str:
        if self._session is None:
            raise DroverError("the stream's session opens when the block is entered")
        return self._session.id

    async def _open_session(self) -> TurnSource:
        assert self._session is not None
        return self._session

    @property
    def turn_id(self) -> str | None:
        """The turn's id once the journal recorded its start."""
        return None if self._running is None else self._running.turn_id

    @property
    def result(self) -> RunResult[OutputT]:
        """How the turn ended (once it has)."""
        if self._result is None:
            raise DroverError("the turn has not ended yet")
        return self._result

    async def __aenter__(self) -> TurnStream[OutputT]:
        if self._running is not None:
            raise DroverError("a turn stream is entered once")
        self._session = await self._open_session()
        self._running = self._session.start(
            self._prompt, live=[self._channel], deps=self._deps, output_type=self._output_type
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        running = self._running
        if running is None or running.task is None:
            return
        if not self._ended and not running.task.done():
            running.interrupt()
        await running.finished()
        self._channel.close()
        self._settle(running)
        if exc_type is None and not running.task.cancelled():
            failure = running.task.exception()
            if failure is not None:
                raise failure

    def cancel(self) -> None:
        """Interrupt the turn now (its work is recorded; the stream then ends)."""
        if self._running is not None and not self._ended:
            self._running.interrupt()

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._running is None:
            raise DroverError(
                "run_stream is a context manager: `async with agent.run_stream(...) as stream: "
                "async for event in stream: ...`"
            )
        return self._events(self._running)

    async def _events(self, running: RunningTurn) -> AsyncIterator[Event]:
        assert running.task is not None
        task = running.task
        task.add_done_callback(lambda _: self._channel.close())
        async for event in self._channel:
            if is_terminal(event):
                self._ended = True  # (before the yield: a reader may leave right after it)
            yield event
            if self._ended:
                # The turn records its end's last details (pending work): wait for them, so
                # that ``result`` is there once the loop is over.
                await asyncio.wait([task])
                self._settle(running)
                return
        # The turn ended without a terminal event reaching this reader: it could not start.
        await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]

    def _settle(self, running: RunningTurn) -> None:
        if self._session is not None and running.end is not None and running.turn_id:
            self._result = result_of(self._session.engine, running.turn_id, running.end)
