"""What one flush of streamed text costs the SQLite journal, and where its row lives.

A flush appends one ``partial_text`` row and nothing else (no ``events`` row, no index), in a
file of 1 KiB pages: SQLite writes every page a commit changes whole to the WAL, so the pages a
flush touches are its cost. The WAL is read frame by frame here (its format is SQLite's file
format, stable across versions), with checkpoints turned off so that every frame stays.
"""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from support.writes import append_event, append_partial_text

from drover.core.events import AssistantMessage, UsageReport, event_to_dict
from drover.core.messages import TextBlock, Usage, assistant_message, user_message
from drover.journal.writes import AppendEvent, AppendMessage, referring
from drover.store.sql.dialect import SQLITE
from drover.store.sql.plan import Mode, Plan
from drover.store.sql.store import SqlStore
from drover.store.sqlite import connection as sqlite_conn
from drover.store.sqlite.connection import SqliteConnection
from drover.store.sqlite.store import SqliteStore

T = TypeVar("T")

#: A flush at 320 B/s (~80 tokens/s) under the 250 ms gate: ~80 bytes of text, ten deltas.
TEXT = "a steady answer streaming at a typical rate, eighty bytes in each of the flushes."
FLUSHES = 300


def _wal_frames(wal: Path) -> tuple[int, int, int]:
    """(frames, commits, page size) of a WAL file."""
    data = wal.read_bytes()
    page = struct.unpack(">I", data[8:12])[0]
    frames = commits = 0
    offset = 32
    while offset + 24 + page <= len(data):
        _, size_after_commit = struct.unpack(">II", data[offset : offset + 8])
        frames += 1
        commits += size_after_commit != 0
        offset += 24 + page
    return frames, commits, page


async def test_a_flush_costs_about_one_small_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No checkpoint while the flushes are made: the WAL then holds every frame they wrote.
    monkeypatch.setattr(sqlite_conn, "CHECKPOINT_EVERY", 10 * FLUSHES)
    path = tmp_path / "journal.db"
    async with SqliteStore(path) as store:
        session = await store.create_session(workdir=str(tmp_path), model="m")
        turn = await store.begin_turn(session.id, user_message("go"), "h:1:1", 60.0)

        def quiet(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        await store.connection._call(quiet)
        for i in range(FLUSHES):
            first = 10 * i + 2
            marks = [(first + k, 8 * (k + 1)) for k in range(10)]
            await append_partial_text(
                store, turn.id, 1, 0, TEXT, seq=first, last_seq=first + 9, marks=marks
            )
        frames, commits, page = _wal_frames(Path(f"{path}-wal"))
        with sqlite3.connect(path) as conn:
            in_log = conn.execute("SELECT COUNT(*) FROM events WHERE type = 'text_delta'")
            assert in_log.fetchone() == (0,)
        conn.close()
    assert commits == FLUSHES
    assert page == 1024
    # One leaf page per flush, plus now and then a new leaf, its parent and the file's header.
    assert frames / commits < 2.2
    written = frames * (page + 24)
    assert written / (FLUSHES * len(TEXT)) < 32  # bytes written per byte streamed


async def test_streaming_rows_read_in_number_order_then_fold_into_the_message(
    tmp_path: Path,
) -> None:
    async with SqliteStore(tmp_path / "journal.db") as store:
        session = await store.create_session(workdir=str(tmp_path), model="m")
        turn = await store.begin_turn(session.id, user_message("go"), "h:1:1", 60.0)
        await append_partial_text(store, turn.id, 1, 0, "Hel", seq=2, last_seq=3, marks=[(2, 1)])
        usage = event_to_dict(UsageReport(usage=Usage(), total_input=1, total_output=2))
        await append_event(store, session.id, turn.id, usage, seq=4)
        await append_partial_text(store, turn.id, 1, 0, "lo", seq=5, last_seq=5, marks=[(5, 2)])
        live = await store.events_after(session.id, 1)
        assert [(r.seq, r.type, r.payload.get("text")) for r in live] == [
            (2, "text_delta", "Hel"),
            (4, "usage", None),
            (5, "text_delta", "lo"),
        ]
        assert await store.last_event_seq(session.id) == 5
        assert await store.next_event_seq(session.id) == 6
        assert [r.seq for r in await store.events_after(session.id, 2)] == [2, 4, 5]
        assert [r.seq for r in await store.events_after(session.id, 0, limit=2)] == [2, 4]

        message = assistant_message([TextBlock(text="Hello")])
        carried = event_to_dict(AssistantMessage(message=message))
        logged = referring(AppendEvent(session.id, turn.id, carried, seq=6), message)
        await store.write_batch([AppendMessage(turn.id, message, False, 1, logged, 2)])
        after = await store.events_after(session.id, 1)
        # A usage row sits between the text rows: they move into the log as they were.
        assert [(r.seq, r.type) for r in after] == [
            (2, "text_delta"),
            (4, "usage"),
            (5, "text_delta"),
            (6, "assistant_message"),
        ]
        assert [m.message.text for m in await store.turn_messages(turn.id)] == ["Hello"]
    with sqlite3.connect(tmp_path / "journal.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM partial_text").fetchone() == (0,)
    conn.close()


async def test_a_step_ending_while_the_log_is_read_shows_its_text_once(tmp_path: Path) -> None:
    """``events_after`` reads ``events`` then ``partial_text``; another writer moving the rows
    from one to the other in between must not hide them (or show them twice)."""
    path = tmp_path / "journal.db"

    class Interleaved(SqliteConnection):
        async def perform(self, plan: Plan[T], mode: Mode) -> T:
            return await super().perform(after_first_query(plan, move_rows), mode)

    def move_rows() -> None:  # another process ends the step: the row goes into the log
        with sqlite3.connect(path) as other:
            other.execute(
                "INSERT INTO events (session_num, seq, part, turn_num, type, payload, created_at, "
                "last_seq, marks) SELECT s.num, p.seq, 0, t.num, 'text_delta', "
                "json_object('type', 'text_delta', 'text', p.text, 'index', p.block_index, "
                "'step', p.step), p.created_at, p.last_seq, p.marks FROM partial_text p "
                "JOIN sessions s ON s.id = p.session_id JOIN turns t ON t.id = p.turn_id"
            )
            other.execute("DELETE FROM partial_text")
        other.close()

    async with SqliteStore(path) as store:
        session = await store.create_session(workdir=str(tmp_path), model="m")
        turn = await store.begin_turn(session.id, user_message("go"), "h:1:1", 60.0)
        await append_partial_text(store, turn.id, 1, 0, "Hello", seq=1, last_seq=1)
    async with SqlStore(SQLITE, Interleaved(path)) as reader:
        read = await reader.events_after(session.id)
    assert [(r.seq, r.payload.get("text")) for r in read] == [(1, "Hello")]


def after_first_query(plan: Plan[T], then: Callable[[], None]) -> Plan[T]:
    """``plan``, with ``then`` run once its first statement has been answered."""
    result: Any = None
    first = True
    try:
        while True:
            op = plan.send(result)
            result = yield op
            if first:
                first = False
                then()
    except StopIteration as stop:
        return cast(T, stop.value)
