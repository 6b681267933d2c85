"""SQLite specifics: several writers on one file, migrations, open errors, ``open_store``."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.writes import append_event

from drover.errors import StoreError
from drover.store import default_db_path, open_store
from drover.store.migrations.steps import SQLITE_MIGRATIONS, Migration, applied_migrations, migrate
from drover.store.postgres.store import PostgresStore
from drover.store.sqlite.store import SqliteStore

from .conftest import StoreFactory

N = 150


async def _session(store: SqliteStore) -> tuple[str, str]:
    session = await store.create_session(session_id="shared", workdir="/w", model="m")
    turn = await store.begin_turn(session.id, None, "h:1:1", 30)
    return session.id, turn.id


async def _append(path: Path, who: str, session_id: str, turn_id: str) -> None:
    async with SqliteStore(path) as store:
        for i in range(N):
            await append_event(store, session_id, turn_id, {"type": "tick", "who": who, "i": i})


def _check_log(path: Path, writers: list[str]) -> None:
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT seq, payload FROM events ORDER BY seq").fetchall()
    conn.close()
    assert [seq for seq, _ in rows] == list(range(1, N * len(writers) + 1))
    for who in writers:
        ticks = [p for _, p in rows if f'"who":"{who}"' in p]
        assert len(ticks) == N, f"lost writes of {who}"


async def test_two_stores_in_two_threads_share_a_file(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with SqliteStore(path) as store:
        session_id, turn_id = await _session(store)
    failures: list[BaseException] = []

    def run(who: str) -> None:
        try:
            asyncio.run(_append(path, who, session_id, turn_id))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(who,)) for who in ("t1", "t2")]
    for t in threads:
        t.start()
    # Meanwhile a third store writes from this event loop.
    await _append(path, "loop", session_id, turn_id)
    for t in threads:
        t.join()
    assert not failures
    _check_log(path, ["t1", "t2", "loop"])


_CHILD = """
import asyncio, sys
from pathlib import Path
from drover.journal.writes import AppendEvent
from drover.store.sqlite.store import SqliteStore

async def main():
    async with SqliteStore(Path(sys.argv[1])) as store:
        for i in range(int(sys.argv[4])):
            event = {"type": "tick", "who": "proc", "i": i}
            await store.write_batch([AppendEvent(sys.argv[2], sys.argv[3], event)])

asyncio.run(main())
"""


async def test_two_processes_share_a_file(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with SqliteStore(path) as store:
        session_id, turn_id = await _session(store)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CHILD,
        str(path),
        session_id,
        turn_id,
        str(N),
        stderr=subprocess.PIPE,
    )
    await _append(path, "parent", session_id, turn_id)
    _, err = await child.communicate()
    assert child.returncode == 0, err.decode()
    _check_log(path, ["proc", "parent"])


async def test_pragmas(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "j.db") as store:
        values = await store.connection._call(  # the connection's own settings
            lambda c: [
                c.execute(f"PRAGMA {name}").fetchone()[0]
                for name in ("journal_mode", "busy_timeout", "synchronous", "foreign_keys")
            ]
        )
    assert values == ["wal", 5000, 1, 1]


# -- migrations ------------------------------------------------------------------------------


async def test_migrations_are_recorded_and_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with SqliteStore(path) as store:
        session = await store.create_session(workdir="/w", model="m")
    async with SqliteStore(path) as store:  # reopening applies nothing and keeps the data
        assert await store.get_session(session.id) == session
    conn = sqlite3.connect(path, isolation_level=None)
    names = [m.name for m in SQLITE_MIGRATIONS]
    assert applied_migrations(conn) == names
    assert migrate(conn, 0.0) == []
    assert names == sorted(names)
    conn.close()


async def test_migrations_apply_in_order_from_an_older_schema(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "j.db", isolation_level=None)
    assert migrate(conn, 1.0, SQLITE_MIGRATIONS[:1]) == [SQLITE_MIGRATIONS[0].name]
    assert migrate(conn, 2.0) == [m.name for m in SQLITE_MIGRATIONS[1:]]
    assert applied_migrations(conn) == [m.name for m in SQLITE_MIGRATIONS]
    conn.close()


def test_a_migration_applied_meanwhile_is_not_applied_again(tmp_path: Path) -> None:
    """Between reading the ledger and taking the write lock, another process migrates the
    file: the re-check under the lock must see it (deterministic, unlike a race)."""
    ours = sqlite3.connect(tmp_path / "j.db", isolation_level=None)
    theirs = sqlite3.connect(tmp_path / "j.db", isolation_level=None)

    class MeanwhileMigrated(tuple[Migration, ...]):
        def __iter__(self) -> Iterator[Migration]:
            # ``migrate`` has read the ledger (empty) and now walks the list: the other
            # connection applies everything first.
            assert migrate(theirs, 1.0) == [m.name for m in SQLITE_MIGRATIONS]
            return super().__iter__()

    try:
        assert migrate(ours, 2.0, MeanwhileMigrated(SQLITE_MIGRATIONS)) == []
        assert applied_migrations(ours) == [m.name for m in SQLITE_MIGRATIONS]
    finally:
        ours.close()
        theirs.close()


async def test_concurrent_first_opens(make_store: StoreFactory) -> None:
    """Four stores open a new journal at once: every migration runs once, all four work."""
    stores = [make_store() for _ in range(4)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        made = await asyncio.gather(
            *(s.create_session(workdir=f"/w{i}", model="m") for i, s in enumerate(stores))
        )
        for store in stores:
            assert [await store.get_session(m.id) for m in made] == made
    finally:
        await asyncio.gather(*(s.close() for s in stores))
    if isinstance(stores[0], SqliteStore):
        conn = sqlite3.connect(stores[0].path)
        try:
            rows = conn.execute("SELECT name FROM schema_migrations ORDER BY name").fetchall()
        finally:
            conn.close()
        assert [name for (name,) in rows] == sorted(m.name for m in SQLITE_MIGRATIONS)


# -- opening ---------------------------------------------------------------------------------


async def test_open_errors_are_one_line_store_errors(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database, not at all" * 100)
    for path in (not_a_dir / "j.db", garbage):
        store = SqliteStore(path)
        with pytest.raises(StoreError) as info:
            await store.open()
        message = str(info.value)
        assert "\n" not in message
        assert str(path) in message
    assert "not a database" in message


def test_open_store_picks_the_backend(tmp_path: Path) -> None:
    default = open_store(None)
    assert isinstance(default, SqliteStore)
    assert default.path == str(default_db_path())
    assert default_db_path().name == "drover.db"
    assert isinstance(open_store(str(tmp_path / "x.db")), SqliteStore)
    url = open_store(f"sqlite:///{tmp_path}/y.db")
    assert isinstance(url, SqliteStore)
    assert url.path == f"{tmp_path}/y.db"
    assert isinstance(open_store(":memory:"), SqliteStore)
    assert isinstance(open_store("postgresql://u:p@localhost/db"), PostgresStore)
    with pytest.raises(StoreError, match="unsupported"):
        open_store("mysql://localhost/db")


async def test_in_memory_store() -> None:
    async with open_store(":memory:") as store:
        session = await store.create_session(workdir="/w", model="m")
        assert await store.get_session(session.id) == session


async def test_log_rows_of_a_few_hundred_bytes_stay_on_their_page(tmp_path: Path) -> None:
    """A tool state, ``tool_done`` or ``usage`` row is 240–310 bytes with its ids: kept whole
    on its page, not spilling the rest into an overflow page of its own (1 KiB each)."""
    path = tmp_path / "j.db"
    async with SqliteStore(path) as store:
        session = await store.create_session(workdir="/w", model="m")
        for i in range(60):
            await append_event(store, session.id, None, {"type": "usage", "n": i, "x": "y" * 250})
    conn = sqlite3.connect(path)
    try:
        try:
            pages = conn.execute(
                "SELECT pagetype, COUNT(*) FROM dbstat WHERE name = 'events' GROUP BY pagetype"
            ).fetchall()
        except sqlite3.OperationalError:
            pytest.skip("this SQLite has no dbstat table")
        (rows,) = conn.execute("SELECT COUNT(*) FROM events").fetchone()
    finally:
        conn.close()
    assert rows == 60
    assert "overflow" not in dict(pages)
    assert sum(dict(pages).values()) <= 60 // 2 + 2  # two rows a page (was a page each, and more)


async def test_a_named_file_in_a_missing_directory_is_refused_and_nothing_is_made(
    tmp_path: Path,
) -> None:
    path = tmp_path / "typo" / "deeper" / "x.db"
    with pytest.raises(StoreError) as info:
        await open_store(str(path)).open()
    assert str(info.value) == (
        f"cannot open the journal at {path}: no such directory {path.parent}"
    )
    assert not (tmp_path / "typo").exists()
    # Only drover's own data directory is made on first use.
    async with SqliteStore(path, create_parent=True) as store:
        assert await store.list_sessions() == []
    assert path.is_file()
