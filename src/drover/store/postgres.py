"""The PostgreSQL journal: a :class:`~drover.store.base.Store` several processes or machines share.

It mirrors :class:`~drover.store.sqlite.SqliteStore` call for call (same records, ordering,
recovery and folding rules; the conformance suite runs on both) on psycopg 3's async API;
:mod:`~drover.store.pg_conn` owns the connections and makes a started write finish even when
its caller is cancelled. Every write is one short transaction.

Concurrency. SQLite serialises writers with one file lock; here every write that touches a
session's content first locks its ``sessions`` row (``SELECT … FOR UPDATE``), then reads
``max(seq) + 1`` and inserts under that lock, so event, turn and message sequence numbers stay
contiguous whatever the number of writers and processes. Locks are always taken in the order
session row → turn row, so writers cannot deadlock. :meth:`PostgresStore.recover_orphans` reads
the candidates without locks, then per turn locks the session, takes the turn ``FOR NO KEY UPDATE
SKIP LOCKED`` and re-checks that its owner and lease are unchanged: several processes recovering
at once recover each orphan exactly once, and a turn renewed meanwhile is left alone.

PostgreSQL ``text`` and ``jsonb`` cannot hold U+0000, which SQLite stores: in free text (text
deltas, tool output, errors, JSON strings) it is written as U+FFFD instead of failing the write.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from psycopg.rows import DictRow

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
from drover.store.pg_conn import Conn, PgPool, redact
from drover.store.pg_log import jsonb as _jsonb
from drover.store.pg_log import log_event, log_text, next_event_seq

T = TypeVar("T")
Params = tuple[Any, ...]

_TERMINAL = ", ".join(f"'{state}'" for state in sorted(TERMINAL_TOOL_STATES))
# A call in a terminal state keeps it: a late write cannot reopen it.
_UPSERT_CALL = (
    "INSERT INTO tool_calls (turn_id, call_id, step, call_index, name, state, input, output, "
    "is_error, outcome_unknown, read_only, created_at, updated_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (turn_id, call_id) DO UPDATE SET "
    "step = CASE WHEN excluded.step > 0 THEN excluded.step ELSE tool_calls.step END, "
    "call_index = excluded.call_index, name = excluded.name, state = excluded.state, "
    "input = COALESCE(excluded.input, tool_calls.input), "
    "output = COALESCE(excluded.output, tool_calls.output), "
    "is_error = excluded.is_error, outcome_unknown = excluded.outcome_unknown, "
    "read_only = excluded.read_only OR tool_calls.read_only, "
    f"updated_at = excluded.updated_at WHERE tool_calls.state NOT IN ({_TERMINAL})"
)


def _text(value: str | None) -> str | None:
    return None if value is None else value.replace("\x00", "\ufffd")


class PostgresStore:
    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        min_size: int = 1,
        max_size: int = 4,
    ) -> None:
        self.url = url
        self._clock = clock
        self._min_size = min_size
        self._max_size = max_size
        self._db: PgPool | None = None
        self._opening = asyncio.Lock()

    def __repr__(self) -> str:
        return f"PostgresStore({redact(self.url, self.url)!r})"

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        async with self._opening:
            if self._db is None:
                self._db = await PgPool.open(
                    self.url, now=self._clock(), min_size=self._min_size, max_size=self._max_size
                )

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await asyncio.shield(db.close())

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- plumbing ------------------------------------------------------------------------------

    def _open_db(self) -> PgPool:
        if self._db is None:
            raise StoreError("the journal is not open")
        return self._db

    async def _call(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        return await self._open_db().call(fn)

    async def _write(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        return await self._open_db().write(fn)

    async def _query(self, sql: str, *params: Any) -> list[DictRow]:
        async def fetch(conn: Conn) -> list[DictRow]:
            return await _rows(conn, sql, params)

        return await self._call(fetch)

    @staticmethod
    async def _lock_session(conn: Conn, session_id: str) -> bool:
        cur = await conn.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session_id,))
        return await cur.fetchone() is not None

    @staticmethod
    async def _need_session(conn: Conn, session_id: str) -> None:
        if not await PostgresStore._lock_session(conn, session_id):
            raise StoreError(f"no session {session_id}")

    @staticmethod
    async def _turn_session(conn: Conn, turn_id: str, owner: str | None = None) -> str:
        """Lock the session row of a turn that is still running (under ``owner``, when given)
        — the order every writer follows; the session's id."""
        cur = await conn.execute(
            "SELECT s.id, t.status, t.owner FROM turns t JOIN sessions s ON s.id = t.session_id "
            "WHERE t.id = %s FOR UPDATE OF s",
            (turn_id,),
        )
        row = await cur.fetchone()
        if row is None:
            raise StoreError(f"no turn {turn_id}")
        check_writable(turn_id, str(row["status"]), row["owner"], owner)
        return str(row["id"])

    _log = staticmethod(log_event)

    @staticmethod
    async def _add_message(
        conn: Conn, turn_id: str, message: Message, partial: bool, now: float
    ) -> int:
        return await _seq(
            conn,
            "INSERT INTO messages (turn_id, seq, role, body, partial, created_at) "
            "SELECT %s, COALESCE(MAX(seq), 0) + 1, %s, %s::jsonb, %s, %s "
            "FROM messages WHERE turn_id = %s RETURNING seq",
            (turn_id, message.role, _jsonb(message_to_dict(message)), partial, now, turn_id),
        )

    @staticmethod
    async def _deltas(conn: Conn, turn_id: str) -> list[tuple[int, int, str]]:
        rows = await _rows(
            conn,
            "SELECT step, block_index, text FROM partial_text WHERE turn_id = %s "
            "ORDER BY step, block_index, seq",
            (turn_id,),
        )
        return [(int(r["step"]), int(r["block_index"]), str(r["text"])) for r in rows]

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

        async def insert(conn: Conn) -> SessionRecord:
            cur = await conn.execute(
                "INSERT INTO sessions (id, created_at, updated_at, workdir, model, title, owner) "
                "VALUES (%s, %s, %s, %s, %s, NULL, %s) ON CONFLICT (id) DO NOTHING",
                (record.id, now, now, workdir, model, owner),
            )
            if cur.rowcount == 0:
                raise StoreError(f"session {record.id} already exists")
            return record

        return await self._write(insert)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        rows = await self._query("SELECT * FROM sessions WHERE id = %s", session_id)
        return session_from_row(rows[0]) if rows else None

    async def list_sessions(
        self, limit: int = 50, *, owner: str | None = None
    ) -> list[SessionRecord]:
        rows = await self._query(
            "SELECT * FROM sessions WHERE %s::text IS NULL OR owner = %s::text "
            "ORDER BY updated_at DESC, n DESC LIMIT %s",
            owner,
            owner,
            limit,
        )
        return [session_from_row(r) for r in rows]

    async def latest_session(self, workdir: str) -> SessionRecord | None:
        rows = await self._query(
            "SELECT * FROM sessions WHERE workdir = %s ORDER BY updated_at DESC, n DESC LIMIT 1",
            workdir,
        )
        return session_from_row(rows[0]) if rows else None

    async def set_session_model(self, session_id: str, model: str) -> None:
        now = self._clock()

        async def update(conn: Conn) -> None:
            cur = await conn.execute(
                "UPDATE sessions SET model = %s, updated_at = %s WHERE id = %s",
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
        body = None if user_message is None else _jsonb(message_to_dict(user_message))

        async def insert(conn: Conn) -> TurnRecord:
            await self._need_session(conn, session_id)
            running = await _rows(
                conn,
                "SELECT id FROM turns WHERE session_id = %s AND status = 'running' LIMIT 1",
                (session_id,),
            )
            if running:
                raise SessionBusyError(session_id, str(running[0]["id"]))
            (row,) = await _rows(
                conn,
                "INSERT INTO turns (id, session_id, seq, status, user_message, owner, "
                "lease_expires_at, created_at, updated_at) "
                "SELECT %s, %s, COALESCE(MAX(seq), 0) + 1, 'running', %s::jsonb, %s, %s, %s, %s "
                "FROM turns WHERE session_id = %s RETURNING *",
                (turn_id, session_id, body, owner, now + lease_seconds, now, now, session_id),
            )
            await conn.execute(
                "UPDATE sessions SET updated_at = %s, title = COALESCE(title, %s) WHERE id = %s",
                (now, _text(session_title(user_message)), session_id),
            )
            return turn_from_row(row)

        return await self._write(insert)

    async def renew_lease(self, turn_id: str, owner: str, lease_seconds: float) -> bool:
        now = self._clock()

        async def update(conn: Conn) -> bool:
            cur = await conn.execute(
                "UPDATE turns SET lease_expires_at = %s, updated_at = %s "
                "WHERE id = %s AND owner = %s AND status = 'running'",
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
        usage_json = None if usage is None else _jsonb(usage.to_dict())

        async def update(conn: Conn) -> list[EventRecord]:
            session_id = await self._turn_session(conn, turn_id, owner)
            logged: list[EventRecord] = []
            await self._settle(conn, session_id, turn_id, now, logged, first_seq)
            await conn.execute(
                "UPDATE turns SET status = %s, reason = %s, error = %s, usage = %s::jsonb, "
                "ended_at = %s, updated_at = %s, lease_expires_at = NULL WHERE id = %s",
                (status, _text(reason), _text(error), usage_json, now, now, turn_id),
            )
            await conn.execute(
                "UPDATE sessions SET updated_at = %s WHERE id = %s", (now, session_id)
            )
            if event is not None:
                seq = None if first_seq is None else first_seq + len(logged)
                seq = await self._log(conn, session_id, turn_id, event, now, seq)
                logged.append(logged_event(session_id, seq, turn_id, event, now))
            return logged

        return await self._write(update)

    async def _settle(
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
        returns whether the turn holds any message. The caller holds the session's lock."""
        out = [] if logged is None else logged

        async def log(event: dict[str, Any]) -> None:
            seq = None if first_seq is None else first_seq + len(out)
            seq = await self._log(conn, session_id, turn_id, event, now, seq)
            out.append(logged_event(session_id, seq, turn_id, event, now))

        calls = await _rows(
            conn,
            "SELECT call_id, call_index, name, state, output, read_only FROM tool_calls "
            f"WHERE turn_id = %s AND state NOT IN ({_TERMINAL}) ORDER BY step, call_index",
            (turn_id,),
        )
        for call in calls:
            text, unknown = interrupted_call(call["state"], bool(call["read_only"]))
            output = call["output"] or text
            await conn.execute(
                "UPDATE tool_calls SET state = 'interrupted', output = %s, is_error = TRUE, "
                "outcome_unknown = %s, updated_at = %s WHERE turn_id = %s AND call_id = %s",
                (output, unknown, now, turn_id, call["call_id"]),
            )
            await log(
                interrupted_call_event(
                    call["call_id"], call["call_index"], call["name"], output, unknown
                )
            )
        for message in partial_messages(await self._deltas(conn, turn_id)):
            await self._add_message(conn, turn_id, message, True, now)
            await log(
                {"type": "assistant_message", "message": message_to_dict(message), "partial": True}
            )
        await conn.execute("DELETE FROM partial_text WHERE turn_id = %s", (turn_id,))
        cur = await conn.execute(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE turn_id = %s) AS held", (turn_id,)
        )
        row = await cur.fetchone()
        return row is not None and bool(row["held"])

    async def turns(self, session_id: str) -> list[TurnRecord]:
        rows = await self._query(
            "SELECT * FROM turns WHERE session_id = %s ORDER BY seq", session_id
        )
        return [turn_from_row(r) for r in rows]

    async def discard_pending(self, session_id: str) -> list[str]:
        now = self._clock()

        async def update(conn: Conn) -> list[str]:
            if not await self._lock_session(conn, session_id):
                return []
            rows = await _rows(
                conn,
                "UPDATE turns SET discarded = TRUE, updated_at = %s "
                "WHERE session_id = %s AND NOT discarded "
                "AND status IN ('incomplete', 'failed', 'interrupted') AND seq > (SELECT "
                "COALESCE(MAX(seq), 0) FROM turns WHERE session_id = %s AND status = 'completed') "
                "RETURNING id, seq",
                (now, session_id, session_id),
            )
            return [str(r["id"]) for r in sorted(rows, key=lambda r: int(r["seq"]))]

        return await self._write(update)

    async def recover_orphans(self, is_alive: Callable[[str], bool] | None = None) -> list[str]:
        alive = is_alive or owner_alive

        async def recover(conn: Conn) -> list[str]:
            now = self._clock()
            running = await _rows(
                conn,
                "SELECT id, session_id, owner, lease_expires_at FROM turns "
                "WHERE status = 'running' ORDER BY n",
                (),
            )
            recovered: list[str] = []
            for row in running:
                owner, lease = row["owner"], row["lease_expires_at"]
                if lease is not None and lease > now and owner is not None and alive(owner):
                    continue
                async with conn.transaction():
                    if await self._recover_one(conn, seen=row, now=now):
                        recovered.append(str(row["id"]))
            return recovered

        return await self._call(recover)

    async def _recover_one(self, conn: Conn, *, seen: DictRow, now: float) -> bool:
        turn_id, session_id = str(seen["id"]), str(seen["session_id"])
        await self._lock_session(conn, session_id)
        # Renewed or finished (or recovered by another process) since it was read, or being
        # renewed right now (locked): leave it.
        cur = await conn.execute(
            "SELECT 1 FROM turns WHERE id = %s AND status = 'running' "
            "AND owner IS NOT DISTINCT FROM %s::text "
            "AND lease_expires_at IS NOT DISTINCT FROM %s::double precision "
            "FOR NO KEY UPDATE SKIP LOCKED",
            (turn_id, seen["owner"], seen["lease_expires_at"]),
        )
        if await cur.fetchone() is None:
            return False
        worked = await self._settle(conn, session_id, turn_id, now)
        await conn.execute(
            "UPDATE turns SET status = 'interrupted', reason = 'interrupted', error = %s, "
            "ended_at = %s, updated_at = %s, lease_expires_at = NULL WHERE id = %s",
            (ORPHAN_ERROR, now, now, turn_id),
        )
        await self._log(conn, session_id, turn_id, orphan_end_event(worked), now)
        return True

    # -- the turn's work -----------------------------------------------------------------------

    async def append_message(
        self, turn_id: str, message: Message, *, partial: bool = False, step: int | None = None
    ) -> int:
        now = self._clock()

        async def insert(conn: Conn) -> int:
            await self._turn_session(conn, turn_id)
            seq = await self._add_message(conn, turn_id, message, partial, now)
            if step is not None:
                await conn.execute(
                    "DELETE FROM partial_text WHERE turn_id = %s AND step = %s", (turn_id, step)
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

        async def insert(conn: Conn) -> int:
            session_id = await self._turn_session(conn, turn_id)
            await conn.execute(
                "INSERT INTO partial_text (turn_id, step, block_index, seq, text) "
                "SELECT %s, %s, %s, COALESCE(MAX(seq), 0) + 1, %s FROM partial_text "
                "WHERE turn_id = %s AND step = %s AND block_index = %s",
                (turn_id, step, block_index, _text(text), turn_id, step, block_index),
            )
            event = {"type": "text_delta", "text": text, "index": block_index, "step": step}
            return await log_text(conn, session_id, turn_id, event, now, first, last_seq, encoded)

        return await self._write(insert)

    async def discard_partial_text(self, turn_id: str, step: int) -> None:
        async def delete(conn: Conn) -> None:
            await self._turn_session(conn, turn_id)
            await conn.execute(
                "DELETE FROM partial_text WHERE turn_id = %s AND step = %s", (turn_id, step)
            )

        await self._write(delete)

    async def turn_messages(self, turn_id: str) -> list[StoredMessage]:
        now = self._clock()

        async def load(conn: Conn) -> list[StoredMessage]:
            # One snapshot for both reads: a fold committing in between cannot show twice.
            async with conn.transaction():
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                rows = await _rows(
                    conn, "SELECT * FROM messages WHERE turn_id = %s ORDER BY seq", (turn_id,)
                )
                deltas = await self._deltas(conn, turn_id)
            out = [stored_message_from_row(r) for r in rows]
            first = out[-1].seq + 1 if out else 1
            for seq, message in enumerate(partial_messages(deltas), first):
                out.append(
                    StoredMessage(
                        turn_id=turn_id, seq=seq, message=message, partial=True, created_at=now
                    )
                )
            return out

        return await self._call(load)

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
        input_json = None if input is None else _jsonb(dict(input))
        values = (turn_id, call_id, step, call_index, name, state, input_json, _text(output))
        flags = (is_error, outcome_unknown, read_only, now, now)

        async def upsert(conn: Conn) -> None:
            await self._turn_session(conn, turn_id)
            await conn.execute(_UPSERT_CALL, (*values, *flags))

        await self._write(upsert)

    async def tool_calls(
        self, turn_id: str | None = None, *, session_id: str | None = None
    ) -> list[ToolCallRecord]:
        if (turn_id is None) == (session_id is None):
            raise ValueError("pass exactly one of turn_id and session_id")
        column, key = ("t.id", turn_id) if turn_id is not None else ("t.session_id", session_id)
        rows = await self._query(
            "SELECT tc.* FROM tool_calls tc JOIN turns t ON t.id = tc.turn_id "
            f"WHERE {column} = %s ORDER BY t.seq, tc.step, tc.call_index, tc.created_at",
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

        async def insert(conn: Conn) -> int:
            await self._need_session(conn, session_id)
            return await self._log(conn, session_id, turn_id, event, now, seq, last_seq)

        return await self._write(insert)

    async def last_event_seq(self, session_id: str) -> int:
        rows = await self._query(
            "SELECT COALESCE(MAX(last_seq), 0) AS seq FROM events WHERE session_id = %s",
            session_id,
        )
        return int(rows[0]["seq"])

    async def next_event_seq(self, session_id: str) -> int:
        return await self._call(lambda conn: next_event_seq(conn, session_id))

    async def reserve_seqs(self, session_id: str, upto: int) -> None:
        async def update(conn: Conn) -> None:
            await conn.execute(
                "UPDATE sessions SET seq_reserved = %s WHERE id = %s", (upto, session_id)
            )

        await self._write(update)

    async def events_after(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        rows = await self._query(
            "SELECT * FROM events WHERE session_id = %s AND last_seq > %s "
            "ORDER BY seq, part LIMIT %s",
            session_id,
            after_seq,
            limit,
        )
        return [event_from_row(r) for r in rows]


async def _rows(conn: Conn, sql: str, params: Params) -> list[DictRow]:
    cur = await conn.execute(sql, params)
    return await cur.fetchall()


async def _seq(conn: Conn, sql: str, params: Params) -> int:
    (row,) = await _rows(conn, sql, params)
    return int(row["seq"])
