"""The runner: owns running turns on top of the journal.

It opens sessions from the store (rebuilding committed history and pending work from the
stored turns), runs each turn with the journal as a reliable event sink next to the caller's
live sink, holds an owner lease on the running turn and renews it, and — whenever it opens a
store — recovers turns left ``running`` by a process that is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drover.channel import EventSink, Fanout
from drover.convo import ConversationManager
from drover.errors import DroverError
from drover.events import Error, Incomplete, event_to_dict
from drover.loop import LoopSettings, TurnControl
from drover.messages import Message, Usage
from drover.permissions import PermissionPolicy
from drover.providers.base import Provider
from drover.session import AgentSession, TurnOutcome
from drover.store.base import SessionRecord, SessionStore, Store, owner_id
from drover.store.history import CallsConsulted, build_history
from drover.store.journal import Journal
from drover.store.redact import Redactor
from drover.tools.registry import ToolRegistry

LEASE_SECONDS = 30.0

log = logging.getLogger(__name__)

#: ``(session_id, seq, turn_id, payload)`` of each numbered event.
SessionPublish = Callable[[str, int, str | None, dict[str, Any], int], None]


@dataclass(frozen=True, slots=True)
class SplitHistory:
    committed: list[Message]
    pending: list[Message]


async def load_history(store: SessionStore, session_id: str) -> SplitHistory:
    """Committed history up to the last completed turn; later turns' work is pending."""
    loaded = await store.turns_with_messages(session_id)
    last_done = max((i for i, (t, _) in enumerate(loaded) if t.status == "completed"), default=-1)
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


class Runner:
    def __init__(
        self,
        store: Store,
        *,
        redactor: Redactor | None = None,
        lease_seconds: float = LEASE_SECONDS,
        on_event: SessionPublish | None = None,
    ) -> None:
        """``on_event(session_id, seq, turn_id, payload, prev)`` sees every event of every
        turn as the journal numbers it, live text deltas included, in increasing order, with
        the number of the event before it in the log (the server's hub)."""
        self.store = store
        self.on_event = on_event
        self.redactor = redactor or Redactor()
        self.lease_seconds = lease_seconds
        self.owner = owner_id()

    async def discard_pending(self, session: AgentSession) -> None:
        """Drop the session's unfinished work, in memory and in the journal."""
        session.discard_pending()
        await self.store.discard_pending(session.id)

    async def recover(self) -> list[str]:
        """Mark turns of dead processes interrupted (their work becomes pending)."""
        return await self.store.recover_orphans()

    async def open_session(
        self,
        *,
        workdir: Path,
        model: str,
        session_id: str | None = None,
        continue_latest: bool = False,
    ) -> SessionRecord:
        if session_id is not None:
            record = await self.store.get_session(session_id)
            if record is not None:
                return record
            return await self.store.create_session(
                session_id=session_id, workdir=str(workdir), model=model
            )
        if continue_latest:
            record = await self.store.latest_session(str(workdir))
            if record is None:
                raise DroverError(f"no session to continue in {workdir}")
            return record
        return await self.store.create_session(workdir=str(workdir), model=model)

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
        history = await load_history(self.store, record.id)
        convo.extend(history.committed)
        return AgentSession(
            provider=provider,
            tools=tools,
            workdir=workdir,
            policy=policy,
            convo=convo,
            settings=settings,
            session_id=record.id,
            pending=history.pending,
        )

    async def run(
        self, session: AgentSession, prompt: str | None, live: Sequence[EventSink] = ()
    ) -> TurnOutcome:
        """Run one turn (``prompt=None`` resumes) with the journal recording it.

        Raises :class:`~drover.errors.SessionBusyError` when a turn of the session is running
        in a live process. Live consumers are isolated: one that raises is detached and the turn
        goes on. The turn stops — ``Incomplete``/``Error`` with reason ``error`` — when the
        journal fails for good or another process takes the turn over (lost lease).
        """
        prepared = session.prepare(prompt)
        stored_message = prepared.user_message
        if stored_message is not None:
            stored_message = self.redactor.redact_message(stored_message)
        # A turn left running by a dead process must not keep the session busy.
        await self.store.recover_orphans()
        begin = asyncio.ensure_future(
            self.store.begin_turn(session.id, stored_message, self.owner, self.lease_seconds)
        )
        try:
            turn = await asyncio.shield(begin)
        except asyncio.CancelledError:
            # Interrupted while the turn row was being written: it must not stay running.
            with contextlib.suppress(Exception):
                started = await begin
                await self._end_unrecorded(session.id, started.id)
            raise
        tools = session.tools

        def is_read_only(name: str) -> bool:
            tool = tools.get(name)
            return tool is not None and tool.read_only

        control = TurnControl()
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
        )
        sink = Fanout([journal], live=live)
        renewal = asyncio.get_running_loop().create_task(self._renew(turn.id, control))
        try:
            outcome = await session.execute(prepared, sink, turn_id=turn.id, control=control)
        finally:
            renewal.cancel()
            await asyncio.wait([renewal])
            await journal.aclose()
            if not journal.ended and journal.failure is None:
                await self._end_unrecorded(session.id, turn.id)
        if journal.failure is not None and outcome.event.type == "done" and not journal.ended:
            # The turn finished, but the journal could not record that it did.
            raise journal.failure
        return outcome

    async def _end_unrecorded(self, session_id: str, turn_id: str) -> None:
        """The turn ended without its end reaching the journal (interrupted again while it
        cleaned up, or before it began): close it as recovery would, so it never stays
        ``running``, with its one terminal event."""
        error = "interrupted before the end of the turn was recorded"
        try:
            worked = bool(await self.store.turn_messages(turn_id))
            kind = Incomplete if worked else Error
            end = kind(reason="interrupted", error=error, usage=Usage(partial=True))
            logged = await self.store.end_turn(
                turn_id,
                "interrupted",
                reason="interrupted",
                error=error,
                owner=self.owner,
                event=event_to_dict(end),
            )
        except DroverError as exc:
            log.error("could not end turn %s: %s (recovery will)", turn_id, exc)
            return
        # Live followers (the server's streams) see the end as they see any other.
        publish = self.on_event
        if publish is None:
            return
        for record in logged:
            try:
                prev = record.end_seq - 1 if record.prev is None else record.prev
                publish(session_id, record.end_seq, turn_id, dict(record.payload), prev)
            except Exception:
                log.exception("runner: the event observer failed")

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
