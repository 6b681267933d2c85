"""The journal's :class:`~drover.journal.protocol.Store` over SQL: one store, composed of a
dialect and a connection.

:class:`SqlStore` holds no SQL of its own: each method builds a plan from the module of its
concern — sessions and grants (:mod:`~drover.store.sql.sessions`), turns, leases and recovery
(:mod:`~drover.store.sql.turns`), holds on a session between turns
(:mod:`~drover.store.sql.holds`), the turn's messages and tool calls
(:mod:`~drover.store.sql.work`) and streamed text (:mod:`~drover.store.sql.text`), a batch of
writes (:mod:`~drover.store.sql.batch`), the event log (:mod:`~drover.store.sql.log`),
retention (:mod:`~drover.store.sql.gc`) and the webhook outbox
(:mod:`~drover.store.sql.outbox`) — in the neutral SQL of its
:class:`~drover.store.sql.dialect.Dialect`, and hands it to its
:class:`~drover.store.sql.plan.Connection` with the mode it needs. The SQLite and PostgreSQL
stores (:mod:`drover.store.sqlite.store`, :mod:`drover.store.postgres.store`) only build one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from types import TracebackType
from typing import Any, Self

from drover.core.messages import Message, Usage
from drover.journal.owners import owner_alive
from drover.journal.records import (
    Delivery,
    EventRecord,
    FileImageRecord,
    GrantRecord,
    PruneBatch,
    QueuedMessage,
    SessionRecord,
    StoredMessage,
    ToolCallRecord,
    Transcript,
    TurnRecord,
)
from drover.journal.writes import JournalWrite
from drover.store.sql import (
    files,
    gc,
    holds,
    log,
    outbox,
    queue,
    sessions,
    transcript,
    turn_traces,
    turns,
    work,
)
from drover.store.sql.batch import BULK_CHARS, batch, together, write_plan
from drover.store.sql.dialect import Dialect
from drover.store.sql.plan import Connection, Mode
from drover.store.sql.text import FreedSpace


class SqlStore:
    """The journal's store on a SQL ``connection`` that speaks ``dialect`` (see the module
    docstring). Writes are atomic; one that has started completes even if the awaiting task is
    cancelled."""

    def __init__(
        self, dialect: Dialect, connection: Connection, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.dialect = dialect
        self.connection = connection
        self._clock = clock
        self._space = FreedSpace()

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        await self.connection.open()

    async def close(self) -> None:
        await self.connection.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- sessions and grants -------------------------------------------------------------------

    async def create_session(
        self,
        *,
        session_id: str | None = None,
        workdir: str,
        model: str,
        owner: str | None = None,
    ) -> SessionRecord:
        import uuid  # here: the journal's readers (drover sessions, drover show) never need it

        record = self._new_session(session_id or uuid.uuid4().hex, workdir, model, owner)
        return await self.connection.perform(sessions.create_session(record), "write")

    async def open_session(
        self, session_id: str, *, workdir: str, model: str, owner: str | None = None
    ) -> tuple[SessionRecord, bool]:
        record = self._new_session(session_id, workdir, model, owner)
        return await self.connection.perform(sessions.open_session(record), "write")

    def _new_session(
        self, session_id: str, workdir: str, model: str, owner: str | None
    ) -> SessionRecord:
        now = self._clock()
        return SessionRecord(
            id=session_id,
            created_at=now,
            updated_at=now,
            workdir=workdir,
            model=model,
            title=None,
            owner=owner,
        )

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return await self.connection.perform(sessions.get_session(session_id), "read")

    async def list_sessions(
        self, limit: int = 50, *, owner: str | None = None
    ) -> list[SessionRecord]:
        plan = sessions.list_sessions(self.dialect, limit, owner)
        return await self.connection.perform(plan, "read")

    async def latest_session(self, workdir: str) -> SessionRecord | None:
        plan = sessions.latest_session(self.dialect, workdir)
        return await self.connection.perform(plan, "read")

    async def set_session_model(self, session_id: str, model: str) -> None:
        plan = sessions.set_session_model(session_id, model, self._clock())
        await self.connection.perform(plan, "write")

    async def find_sessions(self, prefix: str, limit: int = 10) -> list[SessionRecord]:
        plan = sessions.find_sessions(self.dialect, prefix, limit)
        return await self.connection.perform(plan, "read")

    async def rename_session(self, session_id: str, title: str) -> None:
        plan = sessions.rename_session(self.dialect, session_id, title)
        await self.connection.perform(plan, "write")

    async def delete_session(self, session_id: str) -> bool:
        plan = sessions.delete_session(self.dialect, session_id, self._space)
        return await self.connection.perform(plan, "write")

    async def add_grant(self, session_id: str, rule: str) -> None:
        plan = sessions.add_grant(self.dialect, session_id, rule, self._clock())
        await self.connection.perform(plan, "write")

    async def grants(self, session_id: str) -> list[GrantRecord]:
        return await self.connection.perform(sessions.grants(session_id), "read")

    async def revoke_grants(self, session_id: str, rule: str | None = None) -> list[str]:
        return await self.connection.perform(sessions.revoke_grants(session_id, rule), "write")

    # -- turns ---------------------------------------------------------------------------------

    async def begin_turn(
        self,
        session_id: str,
        user_message: Message | None,
        owner: str,
        lease_seconds: float,
        *,
        webhook: str | None = None,
        claim: str | None = None,
        hold: str | None = None,
    ) -> TurnRecord:
        now = self._clock()
        import uuid

        plan = turns.begin_turn(
            self.dialect,
            uuid.uuid4().hex,
            session_id,
            user_message,
            owner,
            lease_seconds,
            now,
            webhook,
            claim,
            hold,
        )
        return await self.connection.perform(plan, "write")

    async def hold_session(
        self,
        session_id: str,
        token: str,
        owner: str,
        seconds: float,
        *,
        after: str | None = None,
    ) -> None:
        plan = holds.hold(
            self.dialect, session_id, token, owner, seconds, after, self._clock(), owner_alive
        )
        await self.connection.perform(plan, "write")

    async def renew_hold(self, session_id: str, token: str, seconds: float) -> bool:
        plan = holds.renew(session_id, token, seconds, self._clock())
        return await self.connection.perform(plan, "write") > 0

    async def release_hold(self, session_id: str, token: str) -> None:
        await self.connection.perform(holds.release(self.dialect, session_id, token), "write")

    async def renew_lease(self, turn_id: str, owner: str, lease_seconds: float) -> bool:
        plan = turns.renew_lease(turn_id, owner, lease_seconds, self._clock())
        return await self.connection.perform(plan, "write") > 0

    async def turns(self, session_id: str) -> list[TurnRecord]:
        return await self.connection.perform(turns.turns(session_id), "read")

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        return await self.connection.perform(turns.get_turn(turn_id), "read")

    async def last_turn(self, session_id: str) -> TurnRecord | None:
        return await self.connection.perform(turns.last_turn(session_id), "read")

    async def turn_messages(self, turn_id: str) -> list[StoredMessage]:
        # One snapshot for both reads: a fold committing in between cannot show twice.
        plan = work.turn_messages(turn_id, self._clock())
        return await self.connection.perform(plan, "snapshot")

    async def turns_with_messages(
        self, session_id: str
    ) -> list[tuple[TurnRecord, list[StoredMessage]]]:
        plan = turns.turns_with_messages(session_id, self._clock())
        return await self.connection.perform(plan, "snapshot")

    async def transcript(self, session_id: str) -> Transcript | None:
        plan = transcript.transcript(self.dialect, session_id, self._clock())
        return await self.connection.perform(plan, "snapshot")

    async def tool_calls(
        self, turn_id: str | None = None, *, session_id: str | None = None
    ) -> list[ToolCallRecord]:
        if (turn_id is None) == (session_id is None):
            raise ValueError("pass exactly one of turn_id and session_id")
        return await self.connection.perform(work.tool_calls(turn_id, session_id), "read")

    async def discard_pending(self, session_id: str) -> list[str]:
        plan = turns.discard_pending(self.dialect, session_id, self._clock())
        return await self.connection.perform(plan, "write")

    async def recover_orphans(
        self, is_alive: Callable[[str], bool] | None = None, *, session_id: str | None = None
    ) -> list[str]:
        alive = is_alive or owner_alive
        plan = turns.recover_orphans(self.dialect, self._space, alive, session_id, self._clock)
        return await self.connection.perform(plan, "read")

    # -- queued messages -----------------------------------------------------------------------

    async def enqueue_message(
        self, session_id: str, content: str, *, webhook: str | None = None
    ) -> tuple[QueuedMessage, str | None, EventRecord | None]:
        import uuid

        plan = queue.enqueue(
            self.dialect, uuid.uuid4().hex, session_id, content, self._clock(), webhook
        )
        return await self.connection.perform(plan, "write")

    async def cancel_queued(
        self, session_id: str, message_id: str
    ) -> tuple[bool, str | None, EventRecord | None]:
        plan = queue.cancel(self.dialect, session_id, message_id, self._clock())
        return await self.connection.perform(plan, "write")

    async def log_queue_event(
        self, session_id: str, event: dict[str, Any]
    ) -> tuple[str | None, EventRecord | None]:
        plan = queue.log_if_idle(self.dialect, session_id, event, self._clock())
        return await self.connection.perform(plan, "write")

    async def queued_messages(self, session_id: str, *, every: bool = False) -> list[QueuedMessage]:
        plan = queue.queued(session_id, None if every else "queued")
        return await self.connection.perform(plan, "read")

    async def waiting_sessions(self, limit: int = 100) -> list[str]:
        return await self.connection.perform(queue.waiting_sessions(limit), "read")

    # -- the turn's writes ---------------------------------------------------------------------

    async def write_batch(self, writes: Sequence[JournalWrite]) -> list[Any]:
        """See :meth:`~drover.journal.protocol.TurnJournal.write_batch`: one hop, one
        transaction."""
        now = self._clock()
        made = together(writes)
        mode: Mode = "bulk" if made[2] > BULK_CHARS else "write"
        if len(writes) == 1:  # (most writes: made as they are, checking their own turn)
            plan = write_plan(self.dialect, self._space, writes[0], now)
            return [await self.connection.perform(plan, mode)]
        plan = batch(self.dialect, self._space, writes, now, made)
        return await self.connection.perform(plan, mode)

    # -- forks and rewinds ----------------------------------------------------------------------

    async def fork_session(
        self, source_id: str, *, turn_id: str | None = None, owner: str | None = None
    ) -> SessionRecord:
        import uuid

        plan = files.fork_session(
            self.dialect, source_id, turn_id, lambda: uuid.uuid4().hex, owner, self._clock()
        )
        return await self.connection.perform(plan, "bulk")

    async def file_images(self, session_id: str, from_seq: int) -> list[FileImageRecord]:
        return await self.connection.perform(files.file_images(session_id, from_seq), "read")

    async def file_blob(self, digest: str) -> bytes | None:
        return await self.connection.perform(files.file_blob(digest), "read")

    async def rewind_turns(
        self,
        session_id: str,
        turn_id: str,
        restored: Sequence[tuple[str, int]] = (),
        *,
        hold: str | None = None,
        planned: Sequence[str] | None = None,
    ) -> tuple[list[str], EventRecord | None]:
        plan = files.rewind_turns(
            self.dialect,
            session_id,
            turn_id,
            list(restored),
            self._clock(),
            hold,
            None if planned is None else tuple(planned),
        )
        return await self.connection.perform(plan, "write")

    # -- the event log -------------------------------------------------------------------------

    async def reserve_seqs(
        self,
        session_id: str,
        upto: int,
        *,
        turn_id: str | None = None,
        owner: str | None = None,
    ) -> None:
        plan = log.reserve_seqs(self.dialect, session_id, upto, turn_id, owner)
        await self.connection.perform(plan, "write")

    async def running_usage(self, session_id: str, turn_id: str) -> Usage | None:
        plan = log.running_usage(self.dialect, session_id, turn_id)
        return await self.connection.perform(plan, "read")

    # -- where each turn's span is ---------------------------------------------------------------

    async def record_turn_trace(self, turn_id: str, traceparent: str) -> None:
        plan = turn_traces.record_turn_trace(turn_id, traceparent, self._clock())
        await self.connection.perform(plan, "write")

    async def turn_trace(self, turn_id: str) -> str | None:
        return await self.connection.perform(turn_traces.turn_trace(turn_id), "read")

    async def events_after(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        # One snapshot for both tables: a step's rows moving into ``events`` in between would
        # otherwise show twice or not at all.
        plan = log.events_after(self.dialect, session_id, after_seq, limit)
        return await self.connection.perform(plan, "snapshot")

    async def last_event_seq(self, session_id: str) -> int:
        return await self.connection.perform(log.last_event_seq(self.dialect, session_id), "read")

    async def next_event_seq(self, session_id: str) -> int:
        return await self.connection.perform(log.next_event_seq(self.dialect, session_id), "read")

    async def log_bounds(self, session_id: str) -> tuple[int, int]:
        return await self.connection.perform(log.log_bounds(self.dialect, session_id), "read")

    # -- retention and the webhook outbox -------------------------------------------------------

    async def prune_batch(self, cutoff: float, keep_last: int, limit: int) -> PruneBatch:
        plan = gc.prune_batch(self.dialect, cutoff, keep_last, limit)
        return await self.connection.perform(plan, "bulk")

    async def prune_preview(self, cutoff: float, keep_last: int) -> PruneBatch:
        plan = gc.preview(self.dialect, cutoff, keep_last)
        return await self.connection.perform(plan, "snapshot")

    async def reclaim_space(self, most: int) -> int:
        return await self.connection.perform(gc.reclaim(self.dialect, most), "bulk")

    async def journal_bytes(self) -> tuple[int, int]:
        return await self.connection.perform(gc.journal_bytes(self.dialect), "read")

    async def vacuum(self) -> None:
        await self.connection.perform(gc.vacuum(self.dialect), "read")

    async def claim_deliveries(
        self, claimer: str, hold_seconds: float, limit: int = 16, *, busy: Collection[str] = ()
    ) -> list[Delivery]:
        now = self._clock()
        plan = outbox.claim_due(self.dialect, claimer, now, hold_seconds, limit, owner_alive, busy)
        return await self.connection.perform(plan, "write")

    async def settle_delivery(
        self, delivery_id: str, claimer: str, *, error: str | None, retry_at: float | None
    ) -> bool:
        plan = outbox.settle_delivery(
            delivery_id, claimer, self._clock(), error=error, retry_at=retry_at
        )
        return await self.connection.perform(plan, "write") > 0

    async def deliveries(self, turn_id: str | None = None) -> list[dict[str, object]]:
        return await self.connection.perform(outbox.deliveries(turn_id), "read")
