"""Running the schema's migrations on PostgreSQL, recorded in ``schema_migrations``.

The list is :data:`drover.store.migrations.steps.MIGRATIONS`, shared with SQLite, as PostgreSQL
spells it (``jsonb`` for JSON, ``boolean`` flags, ``double precision`` wall-clock times, and
identity columns ``n`` on ``sessions`` and ``turns`` standing in for SQLite's ``rowid``: creation
order).

Every step takes a transaction-level advisory lock first and re-reads the ledger under it, so
processes opening a new database together apply each migration exactly once; a step and the row
recording it commit together, so a failure leaves no half-applied step. Migrations are
append-only: a released one is never edited, a change is a new entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

from drover.store.migrations.steps import Migration, for_backend, refuse_newer

#: Key of the advisory lock migrations run under (any constant; "drover" in ASCII).
LOCK_KEY = 0x64726F766572

PG_MIGRATIONS = for_backend("postgres")

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
    refuse_newer(done, migrations)
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
