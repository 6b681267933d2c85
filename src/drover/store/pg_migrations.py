"""The PostgreSQL schema: ordered, named migrations recorded in ``schema_migrations``.

The names are those of :data:`drover.store.migrations.SQLITE_MIGRATIONS` (a test keeps them
equal), so both backends describe the same schema version; the statements are PostgreSQL's own
(``jsonb`` for JSON, ``boolean`` flags, ``double precision`` wall-clock times, and identity
columns ``n`` on ``sessions`` and ``turns`` standing in for SQLite's ``rowid``: creation order).

Every step takes a transaction-level advisory lock first and re-reads the ledger under it, so
processes opening a new database together apply each migration exactly once; a step and the row
recording it commit together, so a failure leaves no half-applied step. Migrations are
append-only: a released one is never edited, a change is a new entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

from drover.store.migrations import Migration

#: Key of the advisory lock migrations run under (any constant; "drover" in ASCII).
LOCK_KEY = 0x64726F766572

PG_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "0001_sessions_and_turns",
        (
            """CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                n BIGINT GENERATED ALWAYS AS IDENTITY,
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL,
                workdir TEXT NOT NULL,
                model TEXT NOT NULL,
                title TEXT
            )""",
            "CREATE INDEX sessions_by_workdir ON sessions (workdir, updated_at)",
            "CREATE INDEX sessions_by_update ON sessions (updated_at)",
            """CREATE TABLE turns (
                id TEXT PRIMARY KEY,
                n BIGINT GENERATED ALWAYS AS IDENTITY,
                session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                seq INTEGER NOT NULL,
                status TEXT NOT NULL CHECK (status IN
                    ('running', 'completed', 'incomplete', 'failed', 'interrupted')),
                user_message JSONB,
                reason TEXT,
                error TEXT,
                usage JSONB,
                owner TEXT,
                lease_expires_at DOUBLE PRECISION,
                discarded BOOLEAN NOT NULL DEFAULT FALSE,
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL,
                ended_at DOUBLE PRECISION,
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
                body JSONB NOT NULL,
                partial BOOLEAN NOT NULL DEFAULT FALSE,
                created_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (turn_id, seq)
            )""",
            """CREATE TABLE partial_text (
                turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
                step INTEGER NOT NULL,
                block_index INTEGER NOT NULL,
                seq INTEGER NOT NULL,
                text TEXT NOT NULL,
                PRIMARY KEY (turn_id, step, block_index, seq)
            )""",
            """CREATE TABLE tool_calls (
                turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
                call_id TEXT NOT NULL,
                step INTEGER NOT NULL DEFAULT 0,
                call_index INTEGER NOT NULL,
                name TEXT NOT NULL,
                state TEXT NOT NULL,
                input JSONB,
                output TEXT,
                is_error BOOLEAN NOT NULL DEFAULT FALSE,
                outcome_unknown BOOLEAN NOT NULL DEFAULT FALSE,
                read_only BOOLEAN NOT NULL DEFAULT FALSE,
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (turn_id, call_id)
            )""",
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
                payload JSONB NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (session_id, seq)
            )""",
        ),
    ),
    Migration(
        "0004_event_seq_ranges",
        (
            "ALTER TABLE events ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0",
            "UPDATE events SET last_seq = seq",
            "ALTER TABLE events ADD COLUMN marks TEXT",
            "ALTER TABLE events ADD COLUMN part INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE events DROP CONSTRAINT events_pkey",
            "ALTER TABLE events ADD PRIMARY KEY (session_id, seq, part)",
            "CREATE INDEX events_by_last_seq ON events (session_id, last_seq)",
            "ALTER TABLE sessions ADD COLUMN seq_reserved BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE sessions ADD COLUMN owner TEXT",
        ),
    ),
)

_LEDGER = """CREATE TABLE IF NOT EXISTS schema_migrations (
    name TEXT PRIMARY KEY,
    applied_at DOUBLE PRECISION NOT NULL
)"""
# Steps run in name order, each under the advisory lock and only after every earlier step was
# recorded, so name order is application order. (``applied_at`` comes from each opener's own
# clock, and two concurrent openers' clocks need not agree.)
_APPLIED = "SELECT name FROM schema_migrations ORDER BY name"


async def applied_migrations(conn: AsyncConnection[Any]) -> list[str]:
    """Names of the applied migrations, in the order they were applied (none: an empty list)."""
    cur = await conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL")
    row = await cur.fetchone()
    if row is None or not row[0]:
        return []
    cur = await conn.execute(_APPLIED)
    return [str(r[0]) for r in await cur.fetchall()]


async def migrate(
    conn: AsyncConnection[Any],
    now: float,
    migrations: Sequence[Migration] = PG_MIGRATIONS,
) -> list[str]:
    """Apply the migrations not yet recorded, in order; returns the names applied.

    ``conn`` must be in autocommit mode: each step is its own transaction.
    """
    done = set(await applied_migrations(conn))
    applied: list[str] = []
    for migration in migrations:
        if migration.name in done:
            continue
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            await conn.execute(_LEDGER)
            # Another process may have applied it while this one waited for the lock.
            cur = await conn.execute(
                "SELECT 1 FROM schema_migrations WHERE name = %s", (migration.name,)
            )
            if await cur.fetchone() is None:
                for statement in migration.statements:
                    await conn.execute(statement)
                await conn.execute(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES (%s, %s)",
                    (migration.name, now),
                )
                applied.append(migration.name)
    return applied
