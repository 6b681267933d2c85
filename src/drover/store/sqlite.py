"""The SQLite journal: the embedded default :class:`~drover.store.base.Store`.

Its connection lives in one worker thread (:mod:`drover.store.sqlite_conn`); calls are
serialised and shielded. Every write is one short ``BEGIN IMMEDIATE`` transaction, which takes
the write lock up front: several processes (or several stores in one process) can share a file
without "database is locked", and what a write reads to decide (the next sequence number, a
running turn of the session, the turn's owner) holds until it commits.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from drover.errors import SessionBusyError, StoreError
from drover.events import TERMINAL_TOOL_STATES, ToolState, TurnStatus
from drover.messages import Message, Usage, message_to_dict
from drover.store.base import (
    ORPHAN_ERROR,
    EventRecord,
    SessionRecord,
    StoredMessage,
    ToolCallRecord,
    TurnRecord,
    check_writable,
    encode_marks,
    event_from_row,
    interrupted_call,
    interrupted_call_event,
    logged_event,
    orphan_end_event,
    owner_alive,
    partial_messages,
    session_from_row,
    session_title,
    stored_message_from_row,
    tool_call_from_row,
    turn_from_row,
)
from drover.store.sqlite_conn import WRITE, Conn, SqliteConnection
from drover.store.sqlite_log import log_event, log_text, next_event_seq

_TERMINAL = ", ".join(f"'{state}'" for state in sorted(TERMINAL_TOOL_STATES))
# A call in a terminal state keeps it: a late write cannot reopen it.
_UPSERT_CALL = (
    "INSERT INTO tool_calls (turn_id, call_id, step, call_index, name, state, input, output, "
    "is_error, outcome_unknown, read_only, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (turn_id, call_id) DO UPDATE SET "
    "step = CASE WHEN excluded.step > 0 THEN excluded.step ELSE tool_calls.step END, "
    "call_index = excluded.call_index, name = excluded.name, state = excluded.state, "
    "input = COALESCE(excluded.input, tool_calls.input), "
    "output = COALESCE(excluded.output, tool_calls.output), "
    "is_error = excluded.is_error, outcome_unknown = excluded.outcome_unknown, "
    "read_only = MAX(excluded.read_only, tool_calls.read_only), "
    f"updated_at = excluded.updated_at WHERE tool_calls.state NOT IN ({_TERMINAL})"
)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class SqliteStore(SqliteConnection):
    @staticmethod
    def _need_session(conn: Conn, session_id: str) -> None:
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
            raise StoreError(f"no session {session_id}")

    @staticmethod
    def _deltas(conn: Conn, turn_id: str) -> list[tuple[int, int, str]]:
        rows = conn.execute(
            "SELECT step, block_index, text FROM partial_text WHERE turn_id = ? "
            "ORDER BY step, block_index, seq",
            (turn_id,),
        )
        return [(int(r[0]), int(r[1]), str(r[2])) for r in rows]

    @staticmethod
    def _next_seq(conn: Conn, table: str, where: str, params: tuple[Any, ...]) -> int:
        sql = f"SELECT COALESCE(MAX(seq), 0) + 1 FROM {table} WHERE {where}"
        return int(conn.execute(sql, params).fetchone()[0])

    @staticmethod
    def _turn_session(conn: Conn, turn_id: str, owner: str | None = None) -> str:
        """The session of a turn that is still running (under ``owner``, when given): the
        only kind of turn whose work may still be written."""
        row = conn.execute(
            "SELECT session_id, status, owner FROM turns WHERE id = ?", (turn_id,)
        ).fetchone()
        if row is None:
            raise StoreError(f"no turn {turn_id}")
        check_writable(turn_id, row["status"], row["owner"], owner)
        return str(row[0])

    _log = staticmethod(log_event)

    @staticmethod
    def _add_message(conn: Conn, turn_id: str, message: Message, partial: bool, now: float) -> int:
        seq = SqliteStore._next_seq(conn, "messages", "turn_id = ?", (turn_id,))
        conn.execute(
            "INSERT INTO messages (turn_id, seq, role, body, partial, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (turn_id, seq, message.role, _dumps(message_to_dict(message)), int(partial), now),
        )
        return seq

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
        record = SessionRecord(
            id=session_id or uuid.uuid4().hex,
            created_at=now,
            updated_at=now,
            workdir=workdir,
            model=model,
            title=None,
            owner=owner,
        )

        def insert(conn: Conn) -> SessionRecord:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (record.id,)).fetchone():
                raise StoreError(f"session {record.id} already exists")
            conn.execute(
                "INSERT INTO sessions (id, created_at, updated_at, workdir, model, title, owner) "
                "VALUES (?, ?, ?, ?, ?, NULL, ?)",
                (record.id, now, now, workdir, model, owner),
            )
            return record

        return await self._write(insert)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        rows = await self._query("SELECT * FROM sessions WHERE id = ?", session_id)
        return session_from_row(rows[0]) if rows else None

    async def list_sessions(
        self, limit: int = 50, *, owner: str | None = None
    ) -> list[SessionRecord]:
        rows = await self._query(
            "SELECT * FROM sessions WHERE ? IS NULL OR owner = ? "
            "ORDER BY updated_at DESC, rowid DESC LIMIT ?",
            owner,
            owner,
            limit,
        )
        return [session_from_row(r) for r in rows]

    async def latest_session(self, workdir: str) -> SessionRecord | None:
        rows = await self._query(
            "SELECT * FROM sessions WHERE workdir = ? ORDER BY updated_at DESC, rowid DESC LIMIT 1",
            workdir,
        )
        return session_from_row(rows[0]) if rows else None

    async def set_session_model(self, session_id: str, model: str) -> None:
        now = self._clock()

        def update(conn: Conn) -> None:
            cur = conn.execute(
                "UPDATE sessions SET model = ?, updated_at = ? WHERE id = ?",
                (model, now, session_id),
            )
            if cur.rowcount == 0:
                raise StoreError(f"no session {session_id}")

        await self._write(update)

    # -- turns ---------------------------------------------------------------------------------

    async def begin_turn(
        self, session_id: str, user_message: Message | None, owner: str, lease_seconds: float
    ) -> TurnRecord:
        now = self._clock()
        turn_id = uuid.uuid4().hex
        body = None if user_message is None else _dumps(message_to_dict(user_message))

        def insert(conn: Conn) -> TurnRecord:
            self._need_session(conn, session_id)
            running = conn.execute(
                "SELECT id FROM turns WHERE session_id = ? AND status = 'running' LIMIT 1",
                (session_id,),
            ).fetchone()
            if running is not None:
                raise SessionBusyError(session_id, str(running[0]))
            seq = self._next_seq(conn, "turns", "session_id = ?", (session_id,))
            conn.execute(
                "INSERT INTO turns (id, session_id, seq, status, user_message, owner, "
                "lease_expires_at, created_at, updated_at) "
                "VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                (turn_id, session_id, seq, body, owner, now + lease_seconds, now, now),
            )
            conn.execute(
                "UPDATE sessions SET updated_at = ?, title = COALESCE(title, ?) WHERE id = ?",
                (now, session_title(user_message), session_id),
            )
            return turn_from_row(
                conn.execute("SELECT * FROM turns WHERE id = ?", (turn_id,)).fetchone()
            )

        return await self._write(insert)

    async def renew_lease(self, turn_id: str, owner: str, lease_seconds: float) -> bool:
        now = self._clock()

        def update(conn: Conn) -> bool:
            cur = conn.execute(
                "UPDATE turns SET lease_expires_at = ?, updated_at = ? "
                "WHERE id = ? AND owner = ? AND status = 'running'",
                (now + lease_seconds, now, turn_id, owner),
            )
            return cur.rowcount > 0

        return await self._write(update)

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
        if status == "running":
            raise StoreError("a turn cannot end as running")
        now = self._clock()
        usage_json = None if usage is None else _dumps(usage.to_dict())

        def update(conn: Conn) -> list[EventRecord]:
            session_id = self._turn_session(conn, turn_id, owner)
            logged: list[EventRecord] = []
            self._settle(conn, session_id, turn_id, now, logged, first_seq)
            conn.execute(
                "UPDATE turns SET status = ?, reason = ?, error = ?, usage = ?, ended_at = ?, "
                "updated_at = ?, lease_expires_at = NULL WHERE id = ?",
                (status, reason, error, usage_json, now, now, turn_id),
            )
            conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id))
            if event is not None:
                seq = None if first_seq is None else first_seq + len(logged)
                seq = self._log(conn, session_id, turn_id, event, now, seq)
                logged.append(logged_event(session_id, seq, turn_id, event, now))
            return logged

        return await self._write(update)

    def _settle(
        self,
        conn: Conn,
        session_id: str,
        turn_id: str,
        now: float,
        logged: list[EventRecord] | None = None,
        first_seq: int | None = None,
    ) -> bool:
        """Close the turn's open tool calls and fold its left-over text deltas into partial
        messages, logging both (into ``logged``, numbered from ``first_seq`` if given);
        returns whether the turn holds any message."""
        out = [] if logged is None else logged

        def log(event: dict[str, Any]) -> None:
            seq = None if first_seq is None else first_seq + len(out)
            seq = self._log(conn, session_id, turn_id, event, now, seq)
            out.append(logged_event(session_id, seq, turn_id, event, now))

        calls = conn.execute(
            "SELECT call_id, call_index, name, state, output, read_only FROM tool_calls "
            f"WHERE turn_id = ? AND state NOT IN ({_TERMINAL}) ORDER BY step, call_index",
            (turn_id,),
        ).fetchall()
        for call in calls:
            text, unknown = interrupted_call(call["state"], bool(call["read_only"]))
            output = call["output"] or text
            conn.execute(
                "UPDATE tool_calls SET state = 'interrupted', output = ?, is_error = 1, "
                "outcome_unknown = ?, updated_at = ? WHERE turn_id = ? AND call_id = ?",
                (output, int(unknown), now, turn_id, call["call_id"]),
            )
            log(
                interrupted_call_event(
                    call["call_id"], call["call_index"], call["name"], output, unknown
                )
            )
        for message in partial_messages(self._deltas(conn, turn_id)):
            self._add_message(conn, turn_id, message, True, now)
            log({"type": "assistant_message", "message": message_to_dict(message), "partial": True})
        conn.execute("DELETE FROM partial_text WHERE turn_id = ?", (turn_id,))
        held = conn.execute("SELECT 1 FROM messages WHERE turn_id = ? LIMIT 1", (turn_id,))
        return held.fetchone() is not None

    async def turns(self, session_id: str) -> list[TurnRecord]:
        rows = await self._query(
            "SELECT * FROM turns WHERE session_id = ? ORDER BY seq", session_id
        )
        return [turn_from_row(r) for r in rows]

    async def discard_pending(self, session_id: str) -> list[str]:
        now = self._clock()

        def update(conn: Conn) -> list[str]:
            rows = conn.execute(
                "SELECT id FROM turns WHERE session_id = ? AND discarded = 0 "
                "AND status IN ('incomplete', 'failed', 'interrupted') AND seq > (SELECT "
                "COALESCE(MAX(seq), 0) FROM turns WHERE session_id = ? AND status = 'completed') "
                "ORDER BY seq",
                (session_id, session_id),
            ).fetchall()
            ids = [str(r[0]) for r in rows]
            conn.executemany(
                "UPDATE turns SET discarded = 1, updated_at = ? WHERE id = ?",
                [(now, i) for i in ids],
            )
            return ids

        return await self._write(update)

    async def recover_orphans(self, is_alive: Callable[[str], bool] | None = None) -> list[str]:
        alive = is_alive or owner_alive

        def recover(conn: Conn) -> list[str]:
            now = self._clock()
            running = conn.execute(
                "SELECT id, owner, lease_expires_at FROM turns WHERE status = 'running'"
            ).fetchall()
            recovered: list[str] = []
            for row in running:
                owner, lease = row["owner"], row["lease_expires_at"]
                if lease is not None and lease > now and owner is not None and alive(owner):
                    continue
                done = self._tx(
                    conn, functools.partial(self._recover_one, seen=row, now=now), WRITE
                )
                if done:
                    recovered.append(str(row["id"]))
            return recovered

        return await self._call(recover)

    def _recover_one(self, conn: Conn, *, seen: sqlite3.Row, now: float) -> bool:
        # Renewed or finished (or recovered by another process) since it was read: leave it.
        row = conn.execute(
            "SELECT session_id FROM turns WHERE id = ? AND status = 'running' "
            "AND owner IS ? AND lease_expires_at IS ?",
            (seen["id"], seen["owner"], seen["lease_expires_at"]),
        ).fetchone()
        if row is None:
            return False
        turn_id, session_id = str(seen["id"]), str(row["session_id"])
        worked = self._settle(conn, session_id, turn_id, now)
        conn.execute(
            "UPDATE turns SET status = 'interrupted', reason = 'interrupted', error = ?, "
            "ended_at = ?, updated_at = ?, lease_expires_at = NULL WHERE id = ?",
            (ORPHAN_ERROR, now, now, turn_id),
        )
        self._log(conn, session_id, turn_id, orphan_end_event(worked), now)
        return True

    # -- the turn's work -----------------------------------------------------------------------

    async def append_message(
        self, turn_id: str, message: Message, *, partial: bool = False, step: int | None = None
    ) -> int:
        now = self._clock()

        def insert(conn: Conn) -> int:
            self._turn_session(conn, turn_id)
            seq = self._add_message(conn, turn_id, message, partial, now)
            if step is not None:
                conn.execute(
                    "DELETE FROM partial_text WHERE turn_id = ? AND step = ?", (turn_id, step)
                )
            return seq

        return await self._write(insert)

    async def append_partial_text(
        self,
        turn_id: str,
        step: int,
        block_index: int,
        text: str,
        *,
        seq: int | None = None,
        last_seq: int | None = None,
        marks: Sequence[tuple[int, int]] | None = None,
    ) -> int:
        now = self._clock()
        first = seq
        encoded = None if seq is None else encode_marks(seq, marks)

        def insert(conn: Conn) -> int:
            session_id = self._turn_session(conn, turn_id)
            where = "turn_id = ? AND step = ? AND block_index = ?"
            part = self._next_seq(conn, "partial_text", where, (turn_id, step, block_index))
            conn.execute(
                "INSERT INTO partial_text (turn_id, step, block_index, seq, text) "
                "VALUES (?, ?, ?, ?, ?)",
                (turn_id, step, block_index, part, text),
            )
            event = {"type": "text_delta", "text": text, "index": block_index, "step": step}
            return log_text(conn, session_id, turn_id, event, now, first, last_seq, encoded)

        return await self._write(insert)

    async def discard_partial_text(self, turn_id: str, step: int) -> None:
        def delete(conn: Conn) -> None:
            self._turn_session(conn, turn_id)
            conn.execute("DELETE FROM partial_text WHERE turn_id = ? AND step = ?", (turn_id, step))

        await self._write(delete)

    async def turn_messages(self, turn_id: str) -> list[StoredMessage]:
        now = self._clock()

        def load(conn: Conn) -> list[StoredMessage]:
            rows = conn.execute(
                "SELECT * FROM messages WHERE turn_id = ? ORDER BY seq", (turn_id,)
            ).fetchall()
            out = [stored_message_from_row(r) for r in rows]
            first = out[-1].seq + 1 if out else 1
            for seq, message in enumerate(partial_messages(self._deltas(conn, turn_id)), first):
                out.append(
                    StoredMessage(
                        turn_id=turn_id, seq=seq, message=message, partial=True, created_at=now
                    )
                )
            return out

        return await self._call(lambda conn: self._tx(conn, load, "BEGIN"))

    async def upsert_tool_call(
        self,
        turn_id: str,
        call_id: str,
        *,
        call_index: int,
        name: str,
        state: ToolState,
        input: Mapping[str, Any] | None = None,
        output: str | None = None,
        is_error: bool = False,
        outcome_unknown: bool = False,
        read_only: bool = False,
        step: int = 0,
    ) -> None:
        now = self._clock()
        input_json = None if input is None else _dumps(dict(input))
        values = (turn_id, call_id, step, call_index, name, state, input_json, output)
        flags = (int(is_error), int(outcome_unknown), int(read_only), now, now)

        def upsert(conn: Conn) -> None:
            self._turn_session(conn, turn_id)
            conn.execute(_UPSERT_CALL, (*values, *flags))

        await self._write(upsert)

    async def tool_calls(
        self, turn_id: str | None = None, *, session_id: str | None = None
    ) -> list[ToolCallRecord]:
        if (turn_id is None) == (session_id is None):
            raise ValueError("pass exactly one of turn_id and session_id")
        column, key = ("t.id", turn_id) if turn_id is not None else ("t.session_id", session_id)
        rows = await self._query(
            "SELECT tc.* FROM tool_calls tc JOIN turns t ON t.id = tc.turn_id "
            f"WHERE {column} = ? ORDER BY t.seq, tc.step, tc.call_index, tc.created_at",
            key,
        )
        return [tool_call_from_row(r) for r in rows]

    # -- the event log -------------------------------------------------------------------------

    async def append_event(
        self,
        session_id: str,
        turn_id: str | None,
        event: Mapping[str, Any],
        *,
        seq: int | None = None,
        last_seq: int | None = None,
    ) -> int:
        now = self._clock()
        if "type" not in event:
            raise ValueError("an event needs a type")

        def insert(conn: Conn) -> int:
            self._need_session(conn, session_id)
            return self._log(conn, session_id, turn_id, event, now, seq, last_seq)

        return await self._write(insert)

    async def last_event_seq(self, session_id: str) -> int:
        rows = await self._query(
            "SELECT COALESCE(MAX(last_seq), 0) FROM events WHERE session_id = ?", session_id
        )
        return int(rows[0][0])

    async def next_event_seq(self, session_id: str) -> int:
        return await self._call(lambda conn: next_event_seq(conn, session_id))

    async def reserve_seqs(self, session_id: str, upto: int) -> None:
        await self._write(
            lambda c: c.execute(
                "UPDATE sessions SET seq_reserved = ? WHERE id = ?", (upto, session_id)
            )
        )

    async def events_after(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        rows = await self._query(
            "SELECT * FROM events WHERE session_id = ? AND last_seq > ? ORDER BY seq, part LIMIT ?",
            session_id,
            after_seq,
            -1 if limit is None else limit,
        )
        return [event_from_row(r) for r in rows]
