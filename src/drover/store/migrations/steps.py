"""Ordered, named schema migrations, recorded in ``schema_migrations(name, applied_at)``.

Each migration runs once, in order, inside its own ``BEGIN IMMEDIATE`` transaction together with
the row that records it, so two processes opening the same file at once cannot both apply it
and a failure leaves no half-applied step. Opening an up-to-date database applies nothing.
Migrations are append-only: a released one is never edited, a change is a new entry.

One list, :data:`MIGRATIONS`, serves both backends: a statement names the column types that
differ (``{json}``, ``{time}``, ``{flag}``…, see :data:`TYPES`), and a :class:`PerBackend`
step holds each backend's SQL where more than the types differ. The names are the schema's
version vocabulary, recorded alike by both backends (:mod:`drover.store.migrations.postgres` runs
PostgreSQL's).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from drover.errors import StoreError
from drover.store.migrations import numbers


@dataclass(frozen=True, slots=True)
class Migration:
    name: str
    statements: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PerBackend:
    """A step whose SQL differs between the backends beyond the column types."""

    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]


Step = str | PerBackend

#: The column types and clauses a shared statement names by ``{field}``.
TYPES: dict[str, dict[str, str]] = {
    "sqlite": {
        "json": "TEXT",
        "time": "REAL",
        "flag": "INTEGER",
        "false": "0",
        "created": "",
        "no_rowid": " WITHOUT ROWID",
        "serial": "INTEGER PRIMARY KEY",
        "bytes": "BLOB",
    },
    "postgres": {
        "json": "JSONB",
        "time": "DOUBLE PRECISION",
        "flag": "BOOLEAN",
        "false": "FALSE",
        # Creation order (SQLite's ``rowid``).
        "created": "n BIGINT GENERATED ALWAYS AS IDENTITY,",
        "no_rowid": "",
        "serial": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        "bytes": "BYTEA",
    },
}


#: The schema's history, one list for both backends; the names are its version vocabulary.
MIGRATIONS: tuple[tuple[str, tuple[Step, ...]], ...] = (
    (
        "0001_sessions_and_turns",
        (
            """CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                {created}
                created_at {time} NOT NULL,
                updated_at {time} NOT NULL,
                workdir TEXT NOT NULL,
                model TEXT NOT NULL,
                title TEXT
            )""",
            "CREATE INDEX sessions_by_workdir ON sessions (workdir, updated_at)",
            "CREATE INDEX sessions_by_update ON sessions (updated_at)",
            """CREATE TABLE turns (
                id TEXT PRIMARY KEY,
                {created}
                session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                seq INTEGER NOT NULL,
                status TEXT NOT NULL CHECK (status IN
                    ('running', 'completed', 'incomplete', 'failed', 'interrupted')),
                user_message {json},
                reason TEXT,
                error TEXT,
                usage {json},
                owner TEXT,
                lease_expires_at {time},
                discarded {flag} NOT NULL DEFAULT {false},
                created_at {time} NOT NULL,
                updated_at {time} NOT NULL,
                ended_at {time},
                UNIQUE (session_id, seq)
            )""",
            "CREATE INDEX turns_running ON turns (status) WHERE status = 'running'",
        ),
    ),
    (
        "0002_turn_work",
        (
            """CREATE TABLE messages (
                turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
                seq INTEGER NOT NULL,
                role TEXT NOT NULL,
                body {json} NOT NULL,
                partial {flag} NOT NULL DEFAULT {false},
                created_at {time} NOT NULL,
                PRIMARY KEY (turn_id, seq)
            ){no_rowid}""",
            """CREATE TABLE partial_text (
                turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
                step INTEGER NOT NULL,
                block_index INTEGER NOT NULL,
                seq INTEGER NOT NULL,
                text TEXT NOT NULL,
                PRIMARY KEY (turn_id, step, block_index, seq)
            ){no_rowid}""",
            """CREATE TABLE tool_calls (
                turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
                call_id TEXT NOT NULL,
                step INTEGER NOT NULL DEFAULT 0,
                call_index INTEGER NOT NULL,
                name TEXT NOT NULL,
                state TEXT NOT NULL,
                input {json},
                output TEXT,
                is_error {flag} NOT NULL DEFAULT {false},
                outcome_unknown {flag} NOT NULL DEFAULT {false},
                read_only {flag} NOT NULL DEFAULT {false},
                created_at {time} NOT NULL,
                updated_at {time} NOT NULL,
                PRIMARY KEY (turn_id, call_id)
            ){no_rowid}""",
        ),
    ),
    (
        "0003_event_log",
        (
            """CREATE TABLE events (
                session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                seq INTEGER NOT NULL,
                turn_id TEXT,
                type TEXT NOT NULL,
                payload {json} NOT NULL,
                created_at {time} NOT NULL,
                PRIMARY KEY (session_id, seq)
            ){no_rowid}""",
        ),
    ),
    (
        "0004_event_seq_ranges",
        (
            # A coalesced text row covers the numbers of the live deltas it holds (seq to
            # last_seq); a delta cut by flushes lies in several rows, told apart by ``part``.
            # SQLite cannot change a primary key in place: it copies the table.
            PerBackend(
                sqlite=(
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
                    "INSERT INTO events_ranged (session_id, seq, part, last_seq, turn_id, type, "
                    "payload, created_at) SELECT session_id, seq, 0, seq, turn_id, type, payload, "
                    "created_at FROM events",
                    "DROP TABLE events",
                    "ALTER TABLE events_ranged RENAME TO events",
                ),
                postgres=(
                    "ALTER TABLE events ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0",
                    "UPDATE events SET last_seq = seq",
                    "ALTER TABLE events ADD COLUMN marks TEXT",
                    "ALTER TABLE events ADD COLUMN part INTEGER NOT NULL DEFAULT 0",
                    "ALTER TABLE events DROP CONSTRAINT events_pkey",
                    "ALTER TABLE events ADD PRIMARY KEY (session_id, seq, part)",
                ),
            ),
            "CREATE INDEX events_by_last_seq ON events (session_id, last_seq)",
            # Numbers handed out up to here may exist only in a client's memory.
            PerBackend(
                sqlite=("ALTER TABLE sessions ADD COLUMN seq_reserved INTEGER NOT NULL DEFAULT 0",),
                postgres=(
                    "ALTER TABLE sessions ADD COLUMN seq_reserved BIGINT NOT NULL DEFAULT 0",
                ),
            ),
            "ALTER TABLE sessions ADD COLUMN owner TEXT",
        ),
    ),
    (
        "0005_partial_text_log",
        (
            # A flush of streamed text writes one row here and nothing else: the log's tail
            # while its step streams (numbers, marks, text), moved into ``events`` when the step
            # ends. Keyed by its own increasing number, so SQLite appends it to the last page of
            # one b-tree (no index to update). A row from before this step has no numbers: its
            # log row is in ``events`` already, and it only feeds recovery.
            """CREATE TABLE partial_text_log (
                id {serial},
                turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
                session_id TEXT NOT NULL,
                step INTEGER NOT NULL,
                block_index INTEGER NOT NULL,
                seq INTEGER,
                last_seq INTEGER,
                marks TEXT,
                text TEXT NOT NULL,
                created_at {time} NOT NULL
            )""",
            "INSERT INTO partial_text_log (turn_id, session_id, step, block_index, text, "
            "created_at) SELECT p.turn_id, t.session_id, p.step, p.block_index, p.text, "
            "t.updated_at FROM partial_text p JOIN turns t ON t.id = p.turn_id "
            "ORDER BY p.turn_id, p.step, p.block_index, p.seq",
            "DROP TABLE partial_text",
            "ALTER TABLE partial_text_log RENAME TO partial_text",
            # PostgreSQL's pages are not the bytes that matter; its readers are many processes.
            PerBackend(
                sqlite=(),
                postgres=(
                    "CREATE INDEX partial_text_by_session ON partial_text (session_id, seq)",
                    "CREATE INDEX partial_text_by_turn ON partial_text (turn_id, step)",
                ),
            ),
        ),
    ),
    (
        "0006_permission_grants",
        (
            # What the user allowed "always" in a session: every process running the session's
            # turns reads it at each turn's start, and it outlives a restart.
            """CREATE TABLE permission_grants (
                session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                rule TEXT NOT NULL,
                created_at {time} NOT NULL,
                PRIMARY KEY (session_id, rule)
            ){no_rowid}""",
        ),
    ),
    (
        "0007_session_id_prefix",
        (
            # Finding a session by the start of its id compares ids in byte order: SQLite's
            # primary key already is; PostgreSQL's follows the database's locale.
            PerBackend(
                sqlite=(),
                postgres=('CREATE INDEX sessions_by_id_bytes ON sessions ((id COLLATE "C"))',),
            ),
        ),
    ),
    (
        "0008_turn_traces",
        (
            # The W3C traceparent of a turn's span (when traces were on): the process that
            # recovers or continues the turn links its own spans to it.
            """CREATE TABLE turn_traces (
                turn_id TEXT PRIMARY KEY REFERENCES turns (id) ON DELETE CASCADE,
                traceparent TEXT NOT NULL,
                created_at {time} NOT NULL
            ){no_rowid}""",
        ),
    ),
    (
        "0009_webhook_outbox",
        (
            # Where a turn's end is announced: set when the turn begins, read when it ends.
            "ALTER TABLE turns ADD COLUMN webhook TEXT",
            # A turn's end to announce, written in the transaction that ends the turn, and
            # delivered (at least once) by a server's deliverer. Not tied to its session: a
            # delivery outlives the session's deletion.
            """CREATE TABLE webhook_outbox (
                id TEXT PRIMARY KEY,
                {created}
                session_id TEXT NOT NULL,
                turn_id TEXT NOT NULL,
                url TEXT NOT NULL,
                body TEXT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at {time} NOT NULL,
                claimed_by TEXT,
                claimed_until {time},
                delivered_at {time},
                failed_at {time},
                last_error TEXT,
                created_at {time} NOT NULL
            )""",
            "CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at) "
            "WHERE delivered_at IS NULL AND failed_at IS NULL",
        ),
    ),
    (
        "0010_events_rowid",
        (
            # In a WITHOUT ROWID table a row keeps at most ~234 bytes on its 1 KiB page, and
            # what is left of a longer one takes an overflow page of its own: most log rows
            # (a tool state, ``tool_done``, ``usage``: 240–310 bytes with their ids) used two
            # pages, 2.5 MB of pages for 0.7 MB of rows after 300 tool steps. A rowid table
            # keeps rows up to ~990 bytes on the page; its key becomes a unique index.
            PerBackend(
                sqlite=(
                    """CREATE TABLE events_rowid (
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
                    )""",
                    "INSERT INTO events_rowid (session_id, seq, part, last_seq, turn_id, type, "
                    "payload, marks, created_at) SELECT session_id, seq, part, last_seq, "
                    "turn_id, type, payload, marks, created_at FROM events "
                    "ORDER BY session_id, seq, part",
                    "DROP TABLE events",
                    "ALTER TABLE events_rowid RENAME TO events",
                    "CREATE INDEX events_by_last_seq ON events (session_id, last_seq)",
                ),
                postgres=(),
            ),
        ),
    ),
    (
        "0011_fork_and_file_images",
        (
            # A fork names the session and the last turn its history was copied from.
            "ALTER TABLE sessions ADD COLUMN forked_from TEXT",
            "ALTER TABLE sessions ADD COLUMN forked_turn TEXT",
            # A rewound turn stays, marked (and discarded: history skips it).
            "ALTER TABLE turns ADD COLUMN rewound_at {time}",
            # What a file held before a tool wrote it, once per distinct content.
            """CREATE TABLE file_blobs (
                hash TEXT PRIMARY KEY,
                size INTEGER NOT NULL,
                data {bytes} NOT NULL
            ){no_rowid}""",
            # One row per file write of a tool, in the order of the turn: the content before
            # (``before``: kept in ``file_blobs`` under ``before_hash``, absent, or too large to
            # keep) and the hash of what the tool wrote, which a rewind expects to find.
            """CREATE TABLE file_images (
                turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
                seq INTEGER NOT NULL,
                call_id TEXT NOT NULL,
                path TEXT NOT NULL,
                shown TEXT NOT NULL,
                before TEXT NOT NULL CHECK (before IN ('kept', 'absent', 'too_large')),
                before_hash TEXT,
                before_size INTEGER,
                after_hash TEXT NOT NULL,
                restored_at {time},
                created_at {time} NOT NULL,
                PRIMARY KEY (turn_id, seq)
            ){no_rowid}""",
            "CREATE INDEX file_images_by_blob ON file_images (before_hash)",
        ),
    ),
    (
        "0012_queued_messages",
        (
            # Messages posted while a turn runs, to run in order once it ends (after a crash
            # too). A row is never deleted but with its session: ``status`` moves from
            # ``queued`` to ``started`` (``turn_id``: the turn that ran it, claimed in the
            # same transaction as that turn's start) or ``cancelled``.
            """CREATE TABLE queued_messages (
                id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                seq BIGINT NOT NULL,
                content TEXT NOT NULL,
                status TEXT NOT NULL,
                turn_id TEXT,
                created_at {time} NOT NULL,
                updated_at {time} NOT NULL,
                UNIQUE (session_id, seq)
            )""",
            "CREATE INDEX queued_messages_waiting ON queued_messages (session_id, seq) "
            "WHERE status = 'queued'",
        ),
    ),
    (
        "0013_messages_rowid",
        (
            # As the log in 0010: in a WITHOUT ROWID table a row keeps at most ~234 bytes on
            # its 1 KiB page and the rest goes to overflow pages of its own, the last one mostly
            # empty. An assistant message of 300-900 bytes took a whole overflow page for its
            # tail (messages held 1.25x their bytes in pages after 300 tool steps). A rowid
            # table keeps up to ~990 bytes of a row on a shared page, and of a longer row what
            # does not fill an overflow page; the key becomes a unique index.
            PerBackend(
                sqlite=(
                    """CREATE TABLE messages_rowid (
                        turn_id TEXT NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
                        seq INTEGER NOT NULL,
                        role TEXT NOT NULL,
                        body TEXT NOT NULL,
                        partial INTEGER NOT NULL DEFAULT 0,
                        created_at REAL NOT NULL,
                        PRIMARY KEY (turn_id, seq)
                    )""",
                    "INSERT INTO messages_rowid (turn_id, seq, role, body, partial, created_at) "
                    "SELECT turn_id, seq, role, body, partial, created_at FROM messages "
                    "ORDER BY turn_id, seq",
                    "DROP TABLE messages",
                    "ALTER TABLE messages_rowid RENAME TO messages",
                    """CREATE TABLE tool_calls_rowid (
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
                    )""",
                    "INSERT INTO tool_calls_rowid SELECT turn_id, call_id, step, call_index, "
                    "name, state, input, output, is_error, outcome_unknown, read_only, "
                    "created_at, updated_at FROM tool_calls ORDER BY turn_id, step, call_index",
                    "DROP TABLE tool_calls",
                    "ALTER TABLE tool_calls_rowid RENAME TO tool_calls",
                ),
                postgres=(),
            ),
        ),
    ),
    (
        "0014_last_seq_partial_index",
        (
            # Only a row of coalesced text covers numbers past its own (``last_seq > seq``),
            # and only such rows are looked up by ``last_seq``; every other row is found by its
            # ``seq``, through the key. An index of every row's ``last_seq`` took 0.22x of the
            # history's bytes after 300 tool steps (one row in ~12 is text).
            "DROP INDEX events_by_last_seq",
            "CREATE INDEX events_by_last_seq ON events (session_id, last_seq) WHERE last_seq > seq",
        ),
    ),
    (
        "0015_log_numbers",
        (
            PerBackend(sqlite=numbers.SQLITE, postgres=numbers.POSTGRES),
            *numbers.BOTH,
        ),
    ),
    (
        # The log stores a payload of a known shape as the list of its values
        # (:mod:`drover.store.sql.log_shapes`); the name marks the journals holding such rows, so
        # that a drover that cannot read them refuses the journal instead of misreading it.
        # On PostgreSQL the log's payloads, the messages' bodies and the calls' inputs become
        # text, as SQLite's are: ``jsonb`` orders an object's keys its own way (shortest
        # first), and a replay must send an event's keys in the order they went out, a history
        # read back must give a tool call's input as the model wrote it (a request's bytes are
        # the API's prompt-cache key).
        "0016_log_shapes",
        (
            PerBackend(
                sqlite=(),
                postgres=(
                    "ALTER TABLE events ALTER COLUMN payload TYPE TEXT USING payload::text",
                    "ALTER TABLE messages ALTER COLUMN body TYPE TEXT USING body::text",
                    "ALTER TABLE tool_calls ALTER COLUMN input TYPE TEXT USING input::text",
                ),
            ),
        ),
    ),
    (
        "0017_session_holds",
        (
            # A queued message's own webhook, taken by the turn that runs it (whichever
            # process starts it).
            "ALTER TABLE queued_messages ADD COLUMN webhook TEXT",
            # A session held between turns — by a rewind from its plan to its marks, by a
            # message that stops the running turn until its own turn starts — refuses every
            # other turn start, as a running turn does; leased to a process like a turn.
            """CREATE TABLE session_holds (
                session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
                token TEXT NOT NULL,
                owner TEXT NOT NULL,
                expires_at {time} NOT NULL,
                created_at {time} NOT NULL
            ){no_rowid}""",
        ),
    ),
)


def for_backend(backend: Literal["sqlite", "postgres"]) -> tuple[Migration, ...]:
    """The migrations as one backend runs them."""
    types = TYPES[backend]
    out: list[Migration] = []
    for name, steps in MIGRATIONS:
        statements: list[str] = []
        for step in steps:
            if isinstance(step, PerBackend):
                statements += getattr(step, backend)
            else:
                statements.append(step.format(**types))
        out.append(Migration(name, tuple(statements)))
    return tuple(out)


SQLITE_MIGRATIONS = for_backend("sqlite")

_LEDGER = """CREATE TABLE IF NOT EXISTS schema_migrations (
    name TEXT PRIMARY KEY,
    applied_at REAL NOT NULL
)"""


def refuse_newer(applied: Iterable[str], migrations: Sequence[Migration]) -> None:
    """Refuse a schema a newer drover has migrated past this one's: this version's statements
    would fail on its tables mid-turn (a column renamed, a key changed) and lose that work."""
    known = {m.name for m in migrations}
    unknown = sorted(set(applied) - known)
    if unknown:
        raise StoreError(
            f"its schema is a newer drover's (migration {unknown[-1]} is unknown to this "
            "version): upgrade drover to use it"
        )


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
    listed = tuple(migrations)  # walked once
    refuse_newer(done, listed)
    applied: list[str] = []
    for migration in listed:
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
