"""A journal a newer drover has migrated is refused when opened, with a clear reason: this
version's statements would fail on its tables mid-turn and lose that turn's work."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from drover.errors import StoreError
from drover.store.postgres.store import PostgresStore
from drover.store.sqlite.store import SqliteStore

FUTURE = "9999_from_a_newer_drover"


async def test_sqlite_refuses_a_newer_schema_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with SqliteStore(path) as store:
        session = await store.create_session(workdir="/w", model="m")
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_migrations (name, applied_at) VALUES (?, 2)", (FUTURE,))
    conn.close()
    with pytest.raises(StoreError, match=f"newer drover's .*{FUTURE}.*upgrade drover"):
        async with SqliteStore(path):
            pass
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT id FROM sessions").fetchall() == [(session.id,)]
    finally:
        conn.close()


async def test_postgres_refuses_a_newer_schema(pg_url: str) -> None:
    async with PostgresStore(pg_url) as store:
        await store.create_session(workdir="/w", model="m")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_migrations (name, applied_at) VALUES (%s, 2)", (FUTURE,))
    with pytest.raises(StoreError, match=f"newer drover's .*{FUTURE}"):
        async with PostgresStore(pg_url):
            pass


def test_the_cli_says_so_in_one_line(tmp_path: Path) -> None:
    from cli.helpers import run_drover

    path = tmp_path / "journal.db"
    run = run_drover(["sessions", "--db", str(path)])
    assert run.returncode == 0, run.stderr
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_migrations (name, applied_at) VALUES (?, 2)", (FUTURE,))
    conn.close()
    run = run_drover(["sessions", "--db", str(path)])
    assert run.returncode != 0
    assert "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert FUTURE in line and "upgrade drover" in line
