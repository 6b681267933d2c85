"""Ordered, named schema migrations, recorded in ``schema_migrations(name, applied_at)``.

Each migration runs once, in order, inside its own ``BEGIN IMMEDIATE`` transaction together with
the row that records it, so two processes opening the same file at once cannot both apply it
and a failure leaves no half-applied step. Opening an up-to-date database applies nothing.
Migrations are append-only: a released one is never edited, a change is a new entry.

The names are the schema's version vocabulary; a PostgreSQL backend keeps its own statements
under the same names so both stores describe the same schema version.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Migration:
    name: str
    statements: tuple[str, ...]


SQLITE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "0001_sessions_and_turns",
        (
            """CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                workdir TEXT NOT NULL,
                model TEXT NOT NULL,
                title TEXT
            )""",
            "CREATE INDEX sessions_by_workdir ON sessions (workdir, updated_at)",
            "CREATE INDEX sessions_by_update ON sessions (updated_at)",
            """CREATE TABLE turns (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                seq INTEGER NOT NULL,
                status TEXT NOT NULL CHECK (status IN
                    ('running', 'completed', 'incomplete', 'failed', 'interrupted')),
                user_message TEXT,
                reason TEXT,
                error TEXT,
                usage TEXT,
                owner TEXT,
                lease_expires_at REAL,
                discarded INTEGER NOT NULL DEFAULT 0,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                ended_at REAL,
                UNIQUE (session_id, seq)
            )""",
            "CREATE INDEX turns_running ON turns (status) WHERE status = 'running'",
        ),
    ),
    Migration(
        "0002_turn_work",
        (
            """CREATE TABLE messages (
                turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
                seq INTEGER NOT NULL,
                role TEXT NOT NULL,
                body TEXT NOT NULL,
                partial INTEGER NOT NULL DEFAULT 0,
                created_at REAL NOT NULL,
                PRIMARY KEY (turn_id, seq)
            ) WITHOUT ROWID""",
            """CREATE TABLE partial_text (
                turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
                step INTEGER NOT NULL,
                block_index INTEGER NOT NULL,
                seq INTEGER NOT NULL,
                text TEXT NOT NULL,
                PRIMARY KEY (turn_id, step, block_index, seq)
            ) WITHOUT ROWID""",
            """CREATE TABLE tool_calls (
                turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
                call_id TEXT NOT NULL,
                step INTEGER NOT NULL DEFAULT 0,
                call_index INTEGER NOT NULL,
                name TEXT NOT NULL,
                state TEXT NOT NULL,
                input TEXT,
                output TEXT,
                is_error INTEGER NOT NULL DEFAULT 0,
                outcome_unknown INTEGER NOT NULL DEFAULT 0,
                read_only INTEGER NOT NULL DEFAULT 0,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                PRIMARY KEY (turn_id, call_id)
            ) WITHOUT ROWID""",
        ),
    ),
    Migration(
        "0003_event_log",
        (
            """CREATE TABLE events (
                session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                seq INTEGER NOT NULL,
                turn_id TEXT,
                type TEXT NOT NULL,
                payload TEXT NOT NULL,
                created_at REAL NOT NULL,
                PRIMARY KEY (session_id, seq)
            ) WITHOUT ROWID""",
        ),
    ),
    Migration(
        "0004_event_seq_ranges",
        (
            # A coalesced text row covers the numbers of the live deltas it holds (seq to
            # last_seq); a delta cut by flushes lies in several rows, told apart by ``part``.
            """CREATE TABLE events_ranged (
                session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                seq INTEGER NOT NULL,
                part INTEGER NOT NULL DEFAULT 0,
                last_seq INTEGER NOT NULL,
                turn_id TEXT,
                type TEXT NOT NULL,
                payload TEXT NOT NULL,
                marks TEXT,
                created_at REAL NOT NULL,
                PRIMARY KEY (session_id, seq, part)
            ) WITHOUT ROWID""",
            "INSERT INTO events_ranged (session_id, seq, part, last_seq, turn_id, type, payload, "
            "created_at) SELECT session_id, seq, 0, seq, turn_id, type, payload, created_at "
            "FROM events",
            "DROP TABLE events",
            "ALTER TABLE events_ranged RENAME TO events",
            "CREATE INDEX events_by_last_seq ON events (session_id, last_seq)",
            # Numbers handed out up to here may exist only in a client's memory.
            "ALTER TABLE sessions ADD COLUMN seq_reserved INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE sessions ADD COLUMN owner TEXT",
        ),
    ),
)

_LEDGER = """CREATE TABLE IF NOT EXISTS schema_migrations (
    name TEXT PRIMARY KEY,
    applied_at REAL NOT NULL
)"""


def applied_migrations(conn: sqlite3.Connection) -> list[str]:
    """Names of the applied migrations, in the order they were applied."""
    conn.execute(_LEDGER)
    rows = conn.execute("SELECT name FROM schema_migrations ORDER BY applied_at, rowid")
    return [str(row[0]) for row in rows]


def migrate(
    conn: sqlite3.Connection,
    now: float,
    migrations: Sequence[Migration] = SQLITE_MIGRATIONS,
) -> list[str]:
    """Apply the migrations not yet recorded, in order; returns the names applied.

    ``conn`` must be in autocommit mode (``isolation_level=None``): transactions are explicit.
    """
    conn.execute(_LEDGER)
    done = set(applied_migrations(conn))
    applied: list[str] = []
    for migration in migrations:
        if migration.name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have applied it while this one waited for the lock.
            row = conn.execute(
                "SELECT 1 FROM schema_migrations WHERE name = ?", (migration.name,)
            ).fetchone()
            if row is None:
                for statement in migration.statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                    (migration.name, now),
                )
                applied.append(migration.name)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return applied
