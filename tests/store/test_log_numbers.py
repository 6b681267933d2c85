"""The log, the messages and the tool calls name sessions and turns by number
(``0015_log_numbers``), and the log's payloads leave their type to the row's ``type`` column.

A journal written before the migration reads as it did, on both backends: every log row keeps
its session, its turn (a worker's own turn, which has no row in ``turns``, included), its payload
and its place; every message and tool call its turn; rows written after it are numbered; a fork
copies a turn's messages and calls; deleting a session still takes its rows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.writes import append_event

from drover.core.messages import message_to_dict, user_message
from drover.journal.writes import AppendEvent, UpsertToolCall
from drover.store.migrations.postgres import PG_MIGRATIONS
from drover.store.migrations.postgres import migrate as pg_migrate
from drover.store.migrations.steps import SQLITE_MIGRATIONS, migrate
from drover.store.postgres.store import PostgresStore
from drover.store.sql.store import SqlStore
from drover.store.sqlite.connection import PAGE_SIZE
from drover.store.sqlite.store import SqliteStore

_CUT = [m.name for m in SQLITE_MIGRATIONS].index("0015_log_numbers")
A, B = "a" * 32, "b" * 32
TA, TB = "c" * 32, "d" * 32
WORKER_TURN = "worker-own-turn"
#: (session, seq, part, last_seq, turn, type, payload) of the old journal's log.
LOG: list[tuple[str, int, int, int, str | None, str, dict[str, Any]]] = [
    (A, 1, 0, 1, TA, "turn_started", {"type": "turn_started", "turn_id": TA}),
    (A, 2, 0, 4, TA, "text_delta", {"type": "text_delta", "text": "abc", "index": 0}),
    (A, 5, 0, 5, WORKER_TURN, "worker", {"type": "worker", "worker": 0}),
    (A, 6, 0, 6, None, "title", {"type": "title", "title": "t"}),
    (B, 1, 0, 1, TB, "turn_started", {"type": "turn_started", "turn_id": TB}),
]
_SESSION = (
    "INSERT INTO sessions (id, created_at, updated_at, workdir, model) VALUES (?, 1, 1, '/w', 'm')"
)
_TURN = (
    "INSERT INTO turns (id, session_id, seq, status, created_at, updated_at) "
    "VALUES (?, ?, 1, 'completed', 1, 1)"
)
_MESSAGE = "INSERT INTO messages (turn_id, seq, role, body, created_at) VALUES (?, ?, 'user', ?, 1)"
_CALL = (
    "INSERT INTO tool_calls (turn_id, call_id, step, call_index, name, state, input, output, "
    "created_at, updated_at) VALUES (?, ?, 1, 0, 'read', 'output-available', '{}', ?, 1, 2)"
)
_EVENT = (
    "INSERT INTO events (session_id, seq, part, last_seq, turn_id, type, payload, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, 1)"
)


def _old_rows() -> list[tuple[str, tuple[Any, ...]]]:
    out: list[tuple[str, tuple[Any, ...]]] = [(_SESSION, (A,)), (_SESSION, (B,))]
    out += [(_TURN, (TA, A)), (_TURN, (TB, B))]
    for turn, text in [(TA, "to a"), (TB, "to b")]:
        out.append((_MESSAGE, (turn, 1, json.dumps(message_to_dict(user_message(text))))))
        out.append((_CALL, (turn, f"call-{text}", f"out {text}")))
    out += [(_EVENT, (*row[:6], json.dumps(row[6]))) for row in LOG]
    return out


def _old_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
    migrate(conn, 1.0, SQLITE_MIGRATIONS[:_CUT])
    for sql, params in _old_rows():
        conn.execute(sql, params)
    conn.close()


async def _old_postgres(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await pg_migrate(conn, 1.0, PG_MIGRATIONS[:_CUT])
        for sql, params in _old_rows():
            await conn.execute(sql.replace("?", "%s"), params)


@pytest.fixture
async def old_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> SqlStore:
    if backend == "sqlite":
        _old_sqlite(tmp_path / "journal.db")
        return SqliteStore(tmp_path / "journal.db")
    url = str(request.getfixturevalue("pg_url"))
    await _old_postgres(url)
    return PostgresStore(url)


def _seen(records: list[Any]) -> list[tuple[int, str | None, str, dict[str, Any]]]:
    return [(r.seq, r.turn_id, r.type, r.payload) for r in records]


async def test_an_old_log_reads_as_it_did_and_goes_on_numbered(old_store: SqlStore) -> None:
    async with old_store as store:
        want = [(seq, turn, kind, body) for s, seq, _, _, turn, kind, body in LOG if s == A]
        assert _seen(await store.events_after(A)) == want
        assert [r.type for r in await store.events_after(B)] == ["turn_started"]
        assert await store.last_event_seq(A) == 6
        assert [r.seq for r in await store.events_after(A, after_seq=3)] == [2, 5, 6]
        for turn, text in [(TA, "to a"), (TB, "to b")]:
            assert [m.message.text for m in await store.turn_messages(turn)] == [text]
            calls = await store.tool_calls(turn)
            assert [(c.turn_id, c.call_id, c.output) for c in calls] == [
                (turn, f"call-{text}", f"out {text}")
            ]
        fork = await store.fork_session(A)
        (copied,) = [t for t, _ in await store.turns_with_messages(fork.id)]
        assert [m.message.text for m in await store.turn_messages(copied.id)] == ["to a"]
        assert [c.output for c in await store.tool_calls(copied.id)] == ["out to a"]

        # New rows: of a stored turn, of a worker's own turn, of no turn; a new session's.
        await append_event(store, A, TA, {"type": "note", "n": 1})
        await append_event(store, A, WORKER_TURN, {"type": "note", "n": 2})
        await append_event(store, A, None, {"type": "note", "n": 3})
        c = await store.create_session(workdir="/w", model="m")
        turn = await store.begin_turn(c.id, user_message("go"), "h:1:1", 30)
        await append_event(store, c.id, turn.id, {"type": "note", "n": 4})
        assert _seen((await store.events_after(A))[-3:]) == [
            (7, TA, "note", {"type": "note", "n": 1}),
            (8, WORKER_TURN, "note", {"type": "note", "n": 2}),
            (9, None, "note", {"type": "note", "n": 3}),
        ]
        assert _seen(await store.events_after(c.id)) == [
            (1, turn.id, "note", {"type": "note", "n": 4})
        ]

        # Deleting a session takes its rows, and only its rows.
        assert await store.delete_session(A)
        assert await store.events_after(A) == []
        assert [r.type for r in await store.events_after(B)] == ["turn_started"]
        assert len(await store.events_after(c.id)) == 1


async def test_a_row_holds_numbers_and_its_payload_no_type(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with SqliteStore(path) as store:
        first = await store.create_session(workdir="/w", model="m")
        second = await store.create_session(workdir="/w", model="m")
        turn = await store.begin_turn(second.id, user_message("go"), "h:1:1", 30)
        await append_event(store, second.id, turn.id, {"type": "note", "n": 1})
        await append_event(store, second.id, None, {"type": "bare"})
        (read,) = [r for r in await store.events_after(second.id) if r.type == "note"]
        assert list(read.payload) == ["type", "n"]  # the type first, as it was written
    conn = sqlite3.connect(path)
    try:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(events)")}
        assert not {"session_id", "turn_id"} & columns
        nums = conn.execute("SELECT id, num FROM sessions").fetchall()
        assert len({num for _, num in nums}) == 2
        stored = conn.execute("SELECT type, payload FROM events ORDER BY seq").fetchall()
        assert stored == [("note", '{"n":1}'), ("bare", '{"type":"bare"}')]
        assert first.id not in str(conn.execute("SELECT * FROM events").fetchall())
    finally:
        conn.close()


async def test_a_batch_names_each_rows_turn_whichever_way_it_is_written(tmp_path: Path) -> None:
    """A batch that checked its turn writes that turn's rows by number; a row of a turn it did
    not check (a worker's own) is looked up by id, and so is every row of its statement."""
    async with SqliteStore(tmp_path / "journal.db") as store:
        session = await store.create_session(workdir="/w", model="m")
        turn = await store.begin_turn(session.id, user_message("go"), "h:1:1", 30)
        call = UpsertToolCall(
            turn_id=turn.id, call_id="c1", call_index=0, name="read", state="running"
        )

        def row(seq: int, turn_id: str | None) -> AppendEvent:
            return AppendEvent(session.id, turn_id, {"type": "note", "n": seq}, seq=seq)

        await store.write_batch([call, row(1, turn.id), row(2, None)])  # all by number
        await store.write_batch([call, row(3, turn.id), row(4, WORKER_TURN), row(5, None)])
        await store.write_batch([row(6, turn.id), row(7, WORKER_TURN)])  # nothing checked
        seen = [(r.seq, r.turn_id) for r in await store.events_after(session.id)]
    assert seen == [
        (1, turn.id),
        (2, None),
        (3, turn.id),
        (4, WORKER_TURN),
        (5, None),
        (6, turn.id),
        (7, WORKER_TURN),
    ]
