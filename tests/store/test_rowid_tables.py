"""A journal written before ``0013``: its messages and tool calls move into rowid tables with
every row kept and their keys still enforced; its log reads as before."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from drover.core.messages import message_to_dict, user_message
from drover.store.migrations.steps import SQLITE_MIGRATIONS, migrate
from drover.store.sqlite.connection import PAGE_SIZE
from drover.store.sqlite.store import SqliteStore

OLD = SQLITE_MIGRATIONS[: [m.name for m in SQLITE_MIGRATIONS].index("0013_messages_rowid")]
S, T = "s" * 36, "t" * 36
#: (seq, part, last_seq) of the log's rows: text rows cover ranges, one delta is cut across two
#: rows (5, part 0 and 1), another across rows of different first numbers (9-11 then 11-12).
LOG = [(1, 0, 1), (2, 0, 4), (5, 0, 5), (5, 1, 7), (8, 0, 8), (9, 0, 11), (11, 0, 12), (13, 0, 13)]


def _old_journal(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
    migrate(conn, 1.0, OLD)
    conn.execute(
        "INSERT INTO sessions (id, created_at, updated_at, workdir, model) "
        "VALUES (?, 1, 1, '/w', 'm')",
        (S,),
    )
    conn.execute(
        "INSERT INTO turns (id, session_id, seq, status, created_at, updated_at) "
        "VALUES (?, ?, 1, 'completed', 1, 1)",
        (T, S),
    )
    for seq, text in enumerate(["short", "x" * 700, "y" * 2300], start=1):
        conn.execute(
            "INSERT INTO messages (turn_id, seq, role, body, created_at) "
            "VALUES (?, ?, 'user', ?, 1)",
            (T, seq, json.dumps(message_to_dict(user_message(text)))),
        )
    for index, output in enumerate(["done", "z" * 2300]):
        conn.execute(
            "INSERT INTO tool_calls (turn_id, call_id, step, call_index, name, state, input, "
            "output, created_at, updated_at) VALUES (?, ?, 0, ?, 'read', 'output-available', "
            "'{}', ?, 1, 2)",
            (T, f"call-{index}", index, output),
        )
    for seq, part, last in LOG:
        payload = json.dumps({"type": "note", "at": [seq, part]})
        conn.execute(
            "INSERT INTO events (session_id, seq, part, last_seq, turn_id, type, payload, "
            "created_at) VALUES (?, ?, ?, ?, ?, 'note', ?, 1)",
            (S, seq, part, last, T, payload),
        )
    conn.close()


async def test_an_old_journal_keeps_its_rows_in_rowid_tables(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    _old_journal(path)
    async with SqliteStore(path) as store:
        messages = await store.turn_messages(T)
        assert [m.message.text for m in messages] == ["short", "x" * 700, "y" * 2300]
        calls = await store.tool_calls(T)
        assert [(c.call_id, c.output, c.updated_at) for c in calls] == [
            ("call-0", "done", 2.0),
            ("call-1", "z" * 2300, 2.0),
        ]
        for after in range(15):
            found = await store.events_after(S, after_seq=after)
            want = [[seq, part] for seq, part, last in LOG if last > after]
            assert [e.payload["at"] for e in found] == want, after
        assert (await store.events_after(S, after_seq=6, limit=2))[-1].payload["at"] == [8, 0]
        assert await store.last_event_seq(S) == 13
    conn = sqlite3.connect(path)
    tables = dict(conn.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'table'"))
    with pytest.raises(sqlite3.IntegrityError):  # the key still holds
        conn.execute(
            "INSERT INTO messages (turn_num, seq, role, body, created_at) "
            "VALUES ((SELECT num FROM turns WHERE id = ?), 1, 'u', '{}', 1)",
            (T,),
        )
    conn.close()
    assert "WITHOUT ROWID" not in tables["messages"]
    assert "WITHOUT ROWID" not in tables["tool_calls"]
