"""The SQL journal's logic, written once for every SQL backend.

:class:`SqlStore` implements :class:`~drover.store.base.Store` as plans over a
:class:`~drover.store.dialect.Dialect` (see that module), on the plumbing and event log of
:class:`~drover.store.sql_log.SqlLog`: sessions, numbering, the running-turn and lease rules,
settling a turn that ends (open tool calls closed, left-over text folded into partial messages,
both logged) and recovering orphans. The writes of a running turn (messages, streamed text,
tool calls, group commit) are in :class:`~drover.store.sql_work.SqlWork`, which it builds on.

Every write that touches a session's content first locks that session (SQLite: the write
transaction holds the file; PostgreSQL: ``SELECT … FOR UPDATE`` of its row), then reads
``max(seq) + 1`` and inserts under that lock, so event, turn and message numbers stay contiguous
whatever the number of writers. Locks are taken in the order session → turn, so writers cannot
deadlock. Recovery reads the candidates without locks, then per turn locks the session and
re-checks that the turn's owner and lease are unchanged (PostgreSQL also skips a turn locked by
a renewal in flight): processes recovering at once recover each orphan exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from drover.errors import SessionBusyError, StoreError
from drover.events import (
    AssistantMessage,
    Error,
    Incomplete,
    ToolStateChanged,
    TurnStatus,
    event_to_dict,
)
from drover.messages import Message, Usage, message_to_dict
from drover.store.base import (
    ORPHAN_ERROR,
    EventRecord,
    GrantRecord,
    SessionRecord,
    StoredMessage,
    TurnRecord,
    interrupted_call,
    logged_event,
    owner_alive,
    partial_messages,
    session_title,
)
from drover.store.batch import EndTurn
from drover.store.dialect import Plan, Row, atomic, execute, rows
from drover.store.rows import json_value, session_from_row, turn_from_row
from drover.store.sql_log import Held, first_value
from drover.store.sql_work import RECLAIM_CHECK_BYTES, TERMINAL_SQL, SqlWork
from drover.store.turn_traces import TurnTraceRows

_TERMINAL = TERMINAL_SQL
#: How a comparison of ids says "in byte order" (UTF-8 bytes sort as code points).
_BYTE_ORDER = {"sqlite": "", "postgres": ' COLLATE "C"'}
#: Sorts after every character an id may continue with: the end of a prefix's range.
_LAST_CHAR = "\U0010ffff"


class SqlStore(SqlWork, TurnTraceRows):
    """The shared logic; a backend sets :attr:`dialect` and ``_clock`` and supplies
    :meth:`~drover.store.sql_log.SqlLog._perform`."""

    # -- settling a turn that ends -------------------------------------------------------------

    def _settle(
        self,
        session_id: str,
        turn_id: str,
        now: float,
        logged: list[EventRecord] | None = None,
        first_seq: int | None = None,
    ) -> Plan[bool]:
        """Close the turn's open tool calls and fold its left-over text deltas into partial
        messages, logging both (into ``logged``, numbered from ``first_seq`` if given);
        returns whether the turn holds any message. The caller holds the session's lock."""
        out = [] if logged is None else logged

        def log(event: dict[str, Any]) -> Plan[None]:
            seq = None if first_seq is None else first_seq + len(out)
            seq = yield from self._log(session_id, turn_id, event, now, seq)
            out.append(logged_event(session_id, seq, turn_id, event, now))

        calls = yield from rows(
            "SELECT call_id, call_index, name, state, output, read_only FROM tool_calls "
            f"WHERE turn_id = ? AND state NOT IN ({_TERMINAL}) ORDER BY step, call_index",
            turn_id,
        )
        for call in calls:
            text, unknown = interrupted_call(call["state"], bool(call["read_only"]))
            output = call["output"] or text
            yield from execute(
                "UPDATE tool_calls SET state = 'interrupted', output = ?, is_error = TRUE, "
                "outcome_unknown = ?, updated_at = ? WHERE turn_id = ? AND call_id = ?",
                output,
                unknown,
                now,
                turn_id,
                call["call_id"],
            )
            closed = ToolStateChanged(
                call_id=call["call_id"],
                call_index=call["call_index"],
                name=call["name"],
                state="interrupted",
                output=output,
                is_error=True,
                outcome_unknown=unknown,
            )
            yield from log(event_to_dict(closed))
        for message in partial_messages((yield from self._deltas(turn_id))):
            yield from self._add_message(turn_id, message, True, now)
            yield from log(event_to_dict(AssistantMessage(message=message, partial=True)))
        yield from self._retire(session_id, turn_id, None, now)
        held = yield from rows(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE turn_id = ?) AS held", turn_id
        )
        return bool(first_value(held, "held"))

    # -- sessions ------------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        session_id: str | None = None,
        workdir: str,
        model: str,
        owner: str | None = None,
    ) -> SessionRecord:
        now = self._clock()
        import uuid  # here: the journal's readers (drover sessions, drover show) never need it

        record = SessionRecord(
            id=session_id or uuid.uuid4().hex,
            created_at=now,
            updated_at=now,
            workdir=workdir,
            model=model,
            title=None,
            owner=owner,
        )

        def insert() -> Plan[SessionRecord]:
            count = yield from execute(
                "INSERT INTO sessions (id, created_at, updated_at, workdir, model, title, owner) "
                "VALUES (?, ?, ?, ?, ?, NULL, ?) ON CONFLICT (id) DO NOTHING",
                record.id,
                now,
                now,
                workdir,
                model,
                owner,
            )
            if count == 0:
                raise StoreError(f"session {record.id} already exists")
            return record

        return await self._perform(insert(), "write")

    async def get_session(self, session_id: str) -> SessionRecord | None:
        found = await self._select("SELECT * FROM sessions WHERE id = ?", session_id)
        return session_from_row(found[0]) if found else None

    async def list_sessions(
        self, limit: int = 50, *, owner: str | None = None
    ) -> list[SessionRecord]:
        found = await self._select(
            "SELECT * FROM sessions WHERE ?::text IS NULL OR owner = ?::text "
            f"ORDER BY updated_at DESC, {self.dialect.creation_order} DESC LIMIT ?",
            owner,
            owner,
            limit,
        )
        return [session_from_row(r) for r in found]

    async def latest_session(self, workdir: str) -> SessionRecord | None:
        found = await self._select(
            "SELECT * FROM sessions WHERE workdir = ? "
            f"ORDER BY updated_at DESC, {self.dialect.creation_order} DESC LIMIT 1",
            workdir,
        )
        return session_from_row(found[0]) if found else None

    async def set_session_model(self, session_id: str, model: str) -> None:
        now = self._clock()

        def update() -> Plan[None]:
            count = yield from execute(
                "UPDATE sessions SET model = ?, updated_at = ? WHERE id = ?",
                model,
                now,
                session_id,
            )
            if count == 0:
                raise StoreError(f"no session {session_id}")

        await self._perform(update(), "write")

    async def find_sessions(self, prefix: str, limit: int = 10) -> list[SessionRecord]:
        # A range on the id in byte order (an index on it: the primary key on SQLite, the
        # "C"-collated one of 0007 on PostgreSQL), then the exact test: a locale's order
        # could put a longer id outside the range.
        order = _BYTE_ORDER[self.dialect.name]
        found = await self._select(
            f"SELECT * FROM sessions WHERE id{order} >= ?::text AND id{order} < ?::text "
            f"AND substr(id, 1, ?) = ?::text ORDER BY id{order} LIMIT ?",
            prefix,
            prefix + _LAST_CHAR,
            len(prefix),
            prefix,
            limit,
        )
        return [session_from_row(r) for r in found]

    async def rename_session(self, session_id: str, title: str) -> None:
        def update() -> Plan[None]:
            count = yield from execute(
                "UPDATE sessions SET title = ? WHERE id = ?",
                self.dialect.clean(title),
                session_id,
            )
            if count == 0:
                raise StoreError(f"no session {session_id}")

        await self._perform(update(), "write")

    async def delete_session(self, session_id: str) -> bool:
        def delete() -> Plan[bool]:
            if not (yield from self._lock_session(session_id)):
                return False
            running = yield from rows(
                "SELECT id FROM turns WHERE session_id = ? AND status = 'running' LIMIT 1",
                session_id,
            )
            if running:
                raise SessionBusyError(session_id, str(first_value(running, "id")))
            # Everything else goes with the row: every table that holds a session's content
            # references it, or one of its turns, ON DELETE CASCADE.
            yield from execute("DELETE FROM sessions WHERE id = ?", session_id)
            self._freed = max(self._freed, RECLAIM_CHECK_BYTES)
            yield from self._reclaim()
            return True

        return await self._perform(delete(), "write")

    async def running_usage(self, session_id: str, turn_id: str) -> Usage | None:
        # Newest first, stopping at the turn's usage row or at the first row of another turn
        # (its rows are the log's tail): never more than the turn's own rows are read.
        found = await self._select(
            "SELECT type, turn_id, payload FROM events WHERE session_id = ? "
            f"AND (type = 'usage' OR NOT (turn_id {self.dialect.same} ?::text)) "
            "ORDER BY seq DESC, part DESC LIMIT 1",
            session_id,
            turn_id,
        )
        if not found or found[0]["type"] != "usage" or found[0]["turn_id"] != turn_id:
            return None
        payload = json_value(found[0]["payload"])
        return Usage(
            input_tokens=int(payload.get("total_input", 0)),
            output_tokens=int(payload.get("total_output", 0)),
            partial=True,
        )

    # -- permission grants ---------------------------------------------------------------------

    async def add_grant(self, session_id: str, rule: str) -> None:
        now = self._clock()

        def insert() -> Plan[None]:
            yield from self._need_session(session_id)
            yield from execute(
                "INSERT INTO permission_grants (session_id, rule, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT (session_id, rule) DO NOTHING",
                session_id,
                rule,
                now,
            )

        await self._perform(insert(), "write")

    async def grants(self, session_id: str) -> list[GrantRecord]:
        found = await self._select(
            "SELECT rule, created_at FROM permission_grants WHERE session_id = ? "
            "ORDER BY created_at, rule",
            session_id,
        )
        return [
            GrantRecord(session_id=session_id, rule=str(r["rule"]), created_at=r["created_at"])
            for r in found
        ]

    async def revoke_grants(self, session_id: str, rule: str | None = None) -> list[str]:
        def delete() -> Plan[list[str]]:
            found = yield from rows(
                "SELECT rule FROM permission_grants WHERE session_id = ? "
                "AND (?::text IS NULL OR rule = ?::text) ORDER BY created_at, rule",
                session_id,
                rule,
                rule,
            )
            yield from execute(
                "DELETE FROM permission_grants WHERE session_id = ? "
                "AND (?::text IS NULL OR rule = ?::text)",
                session_id,
                rule,
                rule,
            )
            return [str(r["rule"]) for r in found]

        return await self._perform(delete(), "write")

    # -- turns ---------------------------------------------------------------------------------

    async def begin_turn(
        self, session_id: str, user_message: Message | None, owner: str, lease_seconds: float
    ) -> TurnRecord:
        now = self._clock()
        import uuid

        turn_id = uuid.uuid4().hex
        d = self.dialect
        body = None if user_message is None else d.json(message_to_dict(user_message))

        def insert() -> Plan[TurnRecord]:
            yield from self._need_session(session_id)
            running = yield from rows(
                "SELECT id FROM turns WHERE session_id = ? AND status = 'running' LIMIT 1",
                session_id,
            )
            if running:
                raise SessionBusyError(session_id, str(first_value(running, "id")))
            yield from self._numbered(
                "turns",
                "id, status, user_message, owner, lease_expires_at, created_at, updated_at, "
                "session_id",
                "?, ?, ?::jsonb, ?, ?, ?, ?, ?",
                (turn_id, "running", body, owner, now + lease_seconds, now, now, session_id),
                ("session_id",),
            )
            yield from execute(
                "UPDATE sessions SET updated_at = ?, title = COALESCE(title, ?) WHERE id = ?",
                now,
                d.clean(session_title(user_message)),
                session_id,
            )
            found = yield from rows("SELECT * FROM turns WHERE id = ?", turn_id)
            return turn_from_row(found[0])

        return await self._perform(insert(), "write")

    async def renew_lease(self, turn_id: str, owner: str, lease_seconds: float) -> bool:
        now = self._clock()
        return (
            await self._perform(
                execute(
                    "UPDATE turns SET lease_expires_at = ?, updated_at = ? "
                    "WHERE id = ? AND owner = ? AND status = 'running'",
                    now + lease_seconds,
                    now,
                    turn_id,
                    owner,
                ),
                "write",
            )
            > 0
        )

    async def end_turn(
        self,
        turn_id: str,
        status: TurnStatus,
        *,
        reason: str | None = None,
        error: str | None = None,
        usage: Usage | None = None,
        owner: str | None = None,
        event: Mapping[str, Any] | None = None,
        first_seq: int | None = None,
    ) -> list[EventRecord]:
        write = EndTurn(
            turn_id=turn_id,
            status=status,
            reason=reason,
            error=error,
            usage=usage,
            owner=owner,
            event=event,
            first_seq=first_seq,
        )
        return await self._perform(self._end_turn(write, self._clock()), "write")

    def _end_turn(
        self, w: EndTurn, now: float, held: Held | None = None
    ) -> Plan[list[EventRecord]]:
        if w.status == "running":
            raise StoreError("a turn cannot end as running")
        d = self.dialect
        session_id = yield from self._turn_session(w.turn_id, w.owner, held)
        if held is not None:
            held.forget_turn(w.turn_id)  # ended below: nothing after may write to it
        if w.first_seq is not None:
            before = w.first_seq - 1
        else:
            found = yield from rows(f"SELECT {self._last_seq_sql()} AS seq", session_id, session_id)
            before = int(first_value(found, "seq"))
        logged: list[EventRecord] = []
        yield from self._settle(session_id, w.turn_id, now, logged, w.first_seq)
        yield from execute(
            "UPDATE turns SET status = ?, reason = ?, error = ?, usage = ?::jsonb, "
            "ended_at = ?, updated_at = ?, lease_expires_at = NULL WHERE id = ?",
            w.status,
            d.clean(w.reason),
            d.clean(w.error),
            None if w.usage is None else d.json(w.usage.to_dict()),
            now,
            now,
            w.turn_id,
        )
        if w.event is not None:
            seq = None if w.first_seq is None else w.first_seq + len(logged)
            seq = yield from self._log(session_id, w.turn_id, w.event, now, seq)
            logged.append(logged_event(session_id, seq, w.turn_id, w.event, now))
        if w.first_seq is None:
            yield from execute("UPDATE sessions SET updated_at = ? WHERE id = ?", now, session_id)
        else:
            # The journal numbered the turn and hands out nothing after its end: its
            # reservation shrinks to the numbers used, so the next turn goes on from them.
            yield from execute(
                "UPDATE sessions SET updated_at = ?, seq_reserved = ? WHERE id = ?",
                now,
                w.first_seq + len(logged) - 1,
                session_id,
            )
        out = []
        for record in logged:
            out.append(replace(record, prev=before))
            before = record.end_seq
        return out

    async def turns(self, session_id: str) -> list[TurnRecord]:
        found = await self._select(
            "SELECT * FROM turns WHERE session_id = ? ORDER BY seq", session_id
        )
        return [turn_from_row(r) for r in found]

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        found = await self._select("SELECT * FROM turns WHERE id = ?", turn_id)
        return turn_from_row(found[0]) if found else None

    async def last_turn(self, session_id: str) -> TurnRecord | None:
        found = await self._select(
            "SELECT * FROM turns WHERE session_id = ? ORDER BY seq DESC LIMIT 1", session_id
        )
        return turn_from_row(found[0]) if found else None

    async def turns_with_messages(
        self, session_id: str
    ) -> list[tuple[TurnRecord, list[StoredMessage]]]:
        now = self._clock()

        def load() -> Plan[list[tuple[TurnRecord, list[StoredMessage]]]]:
            found = yield from rows(
                "SELECT * FROM turns WHERE session_id = ? ORDER BY seq", session_id
            )
            out = []
            for row in found:
                turn = turn_from_row(row)
                out.append((turn, (yield from self._turn_messages(turn.id, now))))
            return out

        return await self._perform(load(), "snapshot")

    async def discard_pending(self, session_id: str) -> list[str]:
        now = self._clock()
        pending = (
            "session_id = ? AND NOT discarded "
            "AND status IN ('incomplete', 'failed', 'interrupted') AND seq > (SELECT "
            "COALESCE(MAX(seq), 0) FROM turns WHERE session_id = ? AND status = 'completed')"
        )

        def update() -> Plan[list[str]]:
            if not (yield from self._lock_session(session_id)):
                return []
            found = yield from rows(
                f"SELECT id FROM turns WHERE {pending} ORDER BY seq", session_id, session_id
            )
            if found:
                yield from execute(
                    f"UPDATE turns SET discarded = TRUE, updated_at = ? WHERE {pending}",
                    now,
                    session_id,
                    session_id,
                )
            return [str(r["id"]) for r in found]

        return await self._perform(update(), "write")

    async def recover_orphans(
        self, is_alive: Callable[[str], bool] | None = None, *, session_id: str | None = None
    ) -> list[str]:
        alive = is_alive or owner_alive

        def recover() -> Plan[list[str]]:
            now = self._clock()
            running = yield from rows(
                "SELECT id, session_id, owner, lease_expires_at FROM turns "
                "WHERE status = 'running' AND (?::text IS NULL OR session_id = ?::text) "
                f"ORDER BY {self.dialect.creation_order}",
                session_id,
                session_id,
            )
            recovered: list[str] = []
            for row in running:
                owner, lease = row["owner"], row["lease_expires_at"]
                if lease is not None and lease > now and owner is not None and alive(owner):
                    continue
                if (yield from atomic(self._recover_one(row, now))):
                    recovered.append(str(row["id"]))
            return recovered

        return await self._perform(recover(), "read")

    def _recover_one(self, seen: Row, now: float) -> Plan[bool]:
        turn_id, session_id = str(seen["id"]), str(seen["session_id"])
        d = self.dialect
        yield from self._lock_session(session_id)
        # Renewed or finished (or recovered by another process) since it was read, or being
        # renewed right now (locked): leave it.
        still = yield from rows(
            "SELECT 1 AS one FROM turns WHERE id = ? AND status = 'running' "
            f"AND owner {d.same} ?::text AND lease_expires_at {d.same} ?::double precision"
            f"{d.lock_skip}",
            turn_id,
            seen["owner"],
            seen["lease_expires_at"],
        )
        if not still:
            return False
        worked = yield from self._settle(session_id, turn_id, now)
        yield from execute(
            "UPDATE turns SET status = 'interrupted', reason = 'interrupted', error = ?, "
            "ended_at = ?, updated_at = ?, lease_expires_at = NULL WHERE id = ?",
            ORPHAN_ERROR,
            now,
            now,
            turn_id,
        )
        end = Incomplete if worked else Error
        ended = end(reason="interrupted", error=ORPHAN_ERROR, usage=Usage(partial=True))
        yield from self._log(session_id, turn_id, event_to_dict(ended), now)
        return True
