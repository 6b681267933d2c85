"""Stopping a turn another process runs, for a message that interrupts or rolls it back.

Several ``drover serve`` processes share one journal, and a message posted with ``if_busy``
``interrupt`` or ``rollback`` may reach a process other than the one running the session's
turn. That process is asked, by the control channel the processes already share, to stop the
turn *and to leave the session's queue alone* (the posted message goes first; the queue runs
after its turn, as when both are in one process), and to say when the turn has ended. The
process that received the message waits for that word, reading the journal meanwhile in case
the word is lost (the other process died: its turn is taken over and ends all the same), then
starts the message's turn itself. A turn that has not ended within :data:`STOP_TIMEOUT` leaves
the message refused as busy, as it was before the stop was asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from drover.runtime.runner import Runner
from drover.runtime.turns import RunningTurn

log = logging.getLogger(__name__)

#: ``(session_id) -> (turn_id, owner)`` of a turn running in any process, or None.
RunningElsewhere = Callable[[str], Awaitable[tuple[str, str | None] | None]]
#: Sends a control message to the process ``owner``; False when it cannot be sent.
SendControl = Callable[[str, dict[str, Any]], Awaitable[bool]]

#: The longest wait for another process's turn to end once it was asked to stop (seconds).
STOP_TIMEOUT = 30.0
#: How often the journal is read during that wait, should the other process's word not come.
CHECK_EVERY = 0.5

#: The control operations: ask for a stop, and the answer once the turn has ended.
STOP = "stop"
STOPPED = "stopped"


class RemoteStops:
    """Both sides of a stop across processes (see the module docstring)."""

    def __init__(
        self,
        runner: Runner,
        elsewhere: RunningElsewhere,
        send_control: SendControl,
        *,
        timeout: float = STOP_TIMEOUT,
        check_every: float = CHECK_EVERY,
    ) -> None:
        self._runner = runner
        self._timeout = timeout
        self._check_every = check_every
        self._elsewhere = elsewhere
        self._send = send_control
        #: Stops this process waits for, by (session, turn).
        self._waiting: dict[tuple[str, str], asyncio.Event] = {}
        self._replies: set[asyncio.Task[None]] = set()

    async def stop(self, session_id: str, turn_id: str) -> bool:
        """Have the process running the session's turn ``turn_id`` stop it and keep its queue
        for this process; True once no turn of the session runs, False when that process
        cannot be reached, the turn did not end in time, or another turn runs by then."""
        found = await self._elsewhere(session_id)
        if found is None:
            return True  # over already
        owner = found[1]
        if found[0] != turn_id or owner is None or owner == self._runner.owner:
            return False
        key = (session_id, turn_id)
        ended = self._waiting.setdefault(key, asyncio.Event())
        try:
            message = {"op": STOP, "session": session_id, "turn": turn_id}
            if not await self._send(owner, {**message, "reply_to": self._runner.owner}):
                return False
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._timeout
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ended.wait(), self._check_every)
                found = await self._elsewhere(session_id)
                if found is None:
                    return True
                if found[0] != turn_id:
                    return False  # another turn runs already: the message finds it busy
                if loop.time() >= deadline:
                    log.warning("turn %s of session %s did not stop in time", turn_id, session_id)
                    return False
        finally:
            if self._waiting.get(key) is ended:
                del self._waiting[key]

    def on_control(self, message: dict[str, Any]) -> bool:
        """Act on a stop's control message; False when ``message`` is not one."""
        session_id = str(message.get("session", ""))
        turn_id = str(message.get("turn", ""))
        if message.get("op") == STOPPED:
            ended = self._waiting.get((session_id, turn_id))
            if ended is not None:
                ended.set()
            return True
        if message.get("op") != STOP:
            return False
        running = self._runner.running(session_id)
        if running is not None and running.turn_id == turn_id:
            running.then = None  # the message that stops it goes first; the queue after it
            running.interrupt()
        reply_to = message.get("reply_to")
        if isinstance(reply_to, str):
            reply = asyncio.ensure_future(self._reply(running, reply_to, session_id, turn_id))
            self._replies.add(reply)
            reply.add_done_callback(self._replies.discard)
        return True

    async def _reply(
        self, running: RunningTurn | None, reply_to: str, session_id: str, turn_id: str
    ) -> None:
        """Tell ``reply_to`` once the turn is over (at once when it does not run here)."""
        if running is not None and running.turn_id == turn_id:
            await running.finished()
        answer = {"op": STOPPED, "session": session_id, "turn": turn_id}
        try:
            await self._send(reply_to, answer)
        except Exception as exc:  # the asker reads the journal as well
            log.info("could not tell %s that turn %s stopped (%s)", reply_to, turn_id, exc)
