"""A journal file written by an earlier drover opens: what it had is not re-applied, the
later migrations are (its half-streamed text moves into today's ``partial_text``), and its turn
is recovered and continued by today's store (the schema's migration names are its version)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from support.writes import end_turn

from drover.core.events import MAY_HAVE_RUN_TEXT
from drover.core.messages import user_message
from drover.store.migrations.steps import SQLITE_MIGRATIONS
from drover.store.sqlite.store import SqliteStore

FIXTURE = Path(__file__).parent / "fixtures" / "journal_0004.sql"


async def test_a_journal_from_before_the_shared_schema_opens_recovers_and_continues(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(FIXTURE.read_text(encoding="utf-8"))
    conn.close()
    async with SqliteStore(path) as store:
        (session,) = await store.list_sessions()
        (turn,) = await store.turns(session.id)
        assert turn.status == "running"
        assert await store.recover_orphans(is_alive=lambda owner: False) == [turn.id]
        (call,) = await store.tool_calls(turn.id)
        assert (call.state, call.output, call.outcome_unknown) == (
            "interrupted",
            MAY_HAVE_RUN_TEXT,
            True,
        )
        messages = await store.turn_messages(turn.id)
        assert [(m.message.text, m.partial) for m in messages] == [
            ("Looking.", False),
            ("half an ans", True),
        ]
        recovered = await store.events_after(session.id, after_seq=1)
        assert [e.type for e in recovered] == ["tool_state", "assistant_message", "incomplete"]
        again = await store.begin_turn(session.id, user_message("go on"), "host:2:2", 30.0)
        await end_turn(store, again.id, "completed")
    with sqlite3.connect(path) as conn:
        ledger = conn.execute("SELECT name, applied_at FROM schema_migrations ORDER BY name")
        found = ledger.fetchall()
    old = [(m.name, 1000.0) for m in SQLITE_MIGRATIONS if m.name < "0005"]
    assert found[: len(old)] == old  # the fixture's own migrations, untouched
    assert [name for name, _ in found[len(old) :]] == [
        m.name for m in SQLITE_MIGRATIONS[len(old) :]
    ]
    conn.close()
