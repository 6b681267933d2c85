"""Retention on every backend: old sessions pruned in bounded batches with everything they
hold, the latest kept, a session whose turn runs never touched; SQLite gives the space back."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import psycopg
import support.writes as writes

from drover.core.messages import user_message
from drover.journal.protocol import Store
from drover.journal.retention import Policy, prune
from drover.store.postgres.store import PostgresStore
from drover.store.sql.plan import rows
from drover.store.sql.store import SqlStore
from drover.store.sqlite.store import SqliteStore

from .conftest import StoreFactory

OWNER = "elsewhere:42:7"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def _finished_session(store: Store, session_id: str, payload: str = "x") -> None:
    await store.create_session(session_id=session_id, workdir="/w", model="m")
    turn = await store.begin_turn(session_id, user_message("hi"), OWNER, 30)
    await writes.append_event(store, session_id, turn.id, {"type": "note", "text": payload})
    await writes.end_turn(store, turn.id, "completed", event={"type": "done", "text": "ok"})


async def _count(store: Store, table: str) -> int:
    assert isinstance(store, SqlStore)
    found = await store.connection.perform(rows(f"SELECT COUNT(*) AS n FROM {table}"), "read")
    return int(found[0]["n"])


async def test_prune_keeps_the_recent_the_latest_and_the_running(make_store: StoreFactory) -> None:
    clock = Clock(1000.0)
    async with make_store(clock=clock) as store:
        # The oldest session of all has a turn still running.
        await store.create_session(session_id="busy", workdir="/w", model="m")
        running = await store.begin_turn("busy", user_message("long"), OWNER, 10_000)
        for i in range(1, 6):
            clock.now = 1000.0 + i
            await _finished_session(store, f"old{i}")
        clock.now = 1900.0
        await _finished_session(store, "new")
        clock.now = 2000.0
        policy = Policy(older_than=500, keep_last=2)  # cut-off 1500; keep new and old5

        seen = await prune(store, policy, dry_run=True, clock=clock)
        assert (seen.sessions, seen.turns, seen.events) == (4, 4, 8)
        assert await _count(store, "sessions") == 7  # a dry run deletes nothing

        done = await prune(store, policy, batch=3, clock=clock)
        assert (done.sessions, done.turns, done.events) == (4, 4, 8)
        assert done.batches == 2
        left = sorted(s.id for s in await store.list_sessions())
        assert left == ["busy", "new", "old5"]
        # Everything the pruned sessions held went with them.
        assert await _count(store, "turns") == 3
        assert await _count(store, "events") == 4
        # The running turn goes on and ends as if nothing happened.
        await writes.end_turn(store, running.id, "completed", event={"type": "done"})
        turn = await store.get_turn(running.id)
        assert turn is not None and turn.status == "completed"
        # Its end made it the latest session: old5 is no longer among the two kept.
        assert (await prune(store, policy, clock=clock)).sessions == 1
        assert sorted(s.id for s in await store.list_sessions()) == ["busy", "new"]


async def test_sqlite_gives_the_pruned_space_back(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    async with SqliteStore(tmp_path / "journal.db", clock=clock) as store:
        for i in range(150):
            await _finished_session(store, f"s{i}", "y" * 8000)
        clock.now = 5000.0
        before, _ = await store.journal_bytes()
        done = await prune(store, Policy(older_than=60), batch=40, clock=clock)
        assert done.sessions == 150 and done.bytes_before == before
        assert done.bytes_after < before / 5, (before, done.bytes_after)
        assert done.free_after < 64 * 1024


async def test_postgres_skips_a_session_a_live_write_holds(pg_url: str) -> None:
    clock = Clock(1000.0)
    async with PostgresStore(pg_url, clock=clock) as store:
        for name in ("held", "free"):
            await _finished_session(store, name)
        clock.now = 2000.0
        before, _ = await store.journal_bytes()
        assert before > 0
        with psycopg.connect(pg_url) as conn:  # a live turn's write, mid-transaction
            conn.execute("SELECT 1 FROM sessions WHERE id = 'held' FOR UPDATE")
            done = await asyncio.wait_for(store.prune_batch(1500.0, 0, 10), 10)
            assert done.sessions == 1
        assert [s.id for s in await store.list_sessions()] == ["held"]
        # Once the write committed, the next prune takes it.
        assert (await store.prune_batch(1500.0, 0, 10)).sessions == 1


async def test_an_older_sqlite_file_keeps_its_pages_until_vacuumed(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # made before auto_vacuum was set: mode none
        conn.execute("CREATE TABLE older (x)")
    clock = Clock(1000.0)
    async with SqliteStore(path, clock=clock) as store:
        for i in range(60):
            await _finished_session(store, f"s{i}", "y" * 8000)
        clock.now = 5000.0
        done = await prune(store, Policy(older_than=60), clock=clock)
        assert done.sessions == 60 and done.free_after > 400_000
        assert "free inside it, reused by later writes" in done.describe()
        await store.vacuum()
        size, free = await store.journal_bytes()
        assert free == 0 and size < done.bytes_after / 4
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental from now on
