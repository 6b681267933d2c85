"""The statements of migration ``0015_log_numbers``: sessions and turns get numbers, and the
log, the messages and the tool calls name them by number (:mod:`drover.store.sql.keys`).

Each log row named its session and its turn by their 32-character ids, and the log's key
repeated the session's: ~100 of a row's ~250 bytes after 300 tool steps; a message and a tool
call named their turn the same way, in the row and again in its key. A worker's log rows name
the worker's own turn, which has no row in ``turns``: that id stays, as text. A row's turn in
the log needs no foreign key: a turn is deleted only with its session, and the session's rows
go with it.

SQLite cannot change a table's key in place, so it copies each table (as ``0010`` and ``0013``
did); PostgreSQL swaps the columns.
"""

from __future__ import annotations


def _numbered_sqlite(table: str) -> tuple[str, ...]:
    """Give every row of ``table`` a number, unique in it, and each new row the next one.
    SQLite cannot add an identity column to a table; a write holds the whole file, so no two
    new rows take the same number."""
    return (
        f"ALTER TABLE {table} ADD COLUMN num INTEGER",
        f"UPDATE {table} SET num = rowid",
        f"CREATE UNIQUE INDEX {table}_by_num ON {table} (num)",
        f"CREATE TRIGGER {table}_numbered AFTER INSERT ON {table} WHEN NEW.num IS NULL "
        f"BEGIN UPDATE {table} SET num = (SELECT COALESCE(MAX(num), 0) + 1 FROM {table}) "
        "WHERE rowid = NEW.rowid; END",
    )


def _numbered_postgres(table: str) -> tuple[str, ...]:
    return (
        f"ALTER TABLE {table} ADD COLUMN num BIGINT GENERATED ALWAYS AS IDENTITY",
        f"ALTER TABLE {table} ADD CONSTRAINT {table}_by_num UNIQUE (num)",
    )


def _copied_sqlite(table: str, create: str, columns: str, select: str) -> tuple[str, ...]:
    """Replace ``table`` by ``create`` (a table named ``{table}_numbered``), filled by
    ``select`` into ``columns``."""
    return (
        create,
        f"INSERT INTO {table}_numbered ({columns}) {select}",
        f"DROP TABLE {table}",
        f"ALTER TABLE {table}_numbered RENAME TO {table}",
    )


def _turn_keyed_postgres(table: str, key: str) -> tuple[str, ...]:
    """``table``'s ``turn_id`` replaced by ``turn_num``, its key ``(turn_num, {key})``."""
    return (
        f"ALTER TABLE {table} ADD COLUMN turn_num BIGINT",
        f"UPDATE {table} x SET turn_num = t.num FROM turns t WHERE t.id = x.turn_id",
        f"ALTER TABLE {table} ALTER COLUMN turn_num SET NOT NULL",
        # The key and the foreign key on the id go with its column.
        f"ALTER TABLE {table} DROP COLUMN turn_id",
        f"ALTER TABLE {table} ADD PRIMARY KEY (turn_num, {key})",
        f"ALTER TABLE {table} ADD FOREIGN KEY (turn_num) REFERENCES turns (num) ON DELETE CASCADE",
    )


_EVENTS = """CREATE TABLE events_numbered (
    session_num INTEGER NOT NULL REFERENCES sessions (num) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    part INTEGER NOT NULL DEFAULT 0,
    last_seq INTEGER NOT NULL,
    turn_num INTEGER,
    turn_text TEXT,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    marks TEXT,
    created_at REAL NOT NULL,
    PRIMARY KEY (session_num, seq, part)
)"""
_MESSAGES = """CREATE TABLE messages_numbered (
    turn_num INTEGER NOT NULL REFERENCES turns (num) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    body TEXT NOT NULL,
    partial INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    PRIMARY KEY (turn_num, seq)
)"""
_TOOL_CALLS = """CREATE TABLE tool_calls_numbered (
    turn_num INTEGER NOT NULL REFERENCES turns (num) ON DELETE CASCADE,
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
    PRIMARY KEY (turn_num, call_id)
)"""
_CALL_COLUMNS = (
    "call_id, step, call_index, name, state, input, output, is_error, outcome_unknown, "
    "read_only, created_at, updated_at"
)

SQLITE: tuple[str, ...] = (
    *_numbered_sqlite("sessions"),
    *_numbered_sqlite("turns"),
    *_copied_sqlite(
        "events",
        _EVENTS,
        "session_num, seq, part, last_seq, turn_num, turn_text, type, payload, marks, created_at",
        "SELECT s.num, e.seq, e.part, e.last_seq, t.num, CASE WHEN t.num IS NULL THEN "
        "e.turn_id END, e.type, e.payload, e.marks, e.created_at FROM events e "
        "JOIN sessions s ON s.id = e.session_id LEFT JOIN turns t ON t.id = e.turn_id "
        "ORDER BY s.num, e.seq, e.part",
    ),
    *_copied_sqlite(
        "messages",
        _MESSAGES,
        "turn_num, seq, role, body, partial, created_at",
        "SELECT t.num, m.seq, m.role, m.body, m.partial, m.created_at FROM messages m "
        "JOIN turns t ON t.id = m.turn_id ORDER BY t.num, m.seq",
    ),
    *_copied_sqlite(
        "tool_calls",
        _TOOL_CALLS,
        f"turn_num, {_CALL_COLUMNS}",
        "SELECT t.num, c.call_id, c.step, c.call_index, c.name, c.state, c.input, c.output, "
        "c.is_error, c.outcome_unknown, c.read_only, c.created_at, c.updated_at "
        "FROM tool_calls c JOIN turns t ON t.id = c.turn_id "
        "ORDER BY t.num, c.step, c.call_index",
    ),
)

POSTGRES: tuple[str, ...] = (
    *_numbered_postgres("sessions"),
    *_numbered_postgres("turns"),
    "ALTER TABLE events ADD COLUMN session_num BIGINT",
    "ALTER TABLE events ADD COLUMN turn_num BIGINT",
    "ALTER TABLE events RENAME COLUMN turn_id TO turn_text",
    "UPDATE events e SET session_num = s.num FROM sessions s WHERE s.id = e.session_id",
    "UPDATE events e SET turn_num = t.num, turn_text = NULL FROM turns t WHERE t.id = e.turn_text",
    "ALTER TABLE events ALTER COLUMN session_num SET NOT NULL",
    # The key and the index on the id go with its column.
    "ALTER TABLE events DROP COLUMN session_id",
    "ALTER TABLE events ADD PRIMARY KEY (session_num, seq, part)",
    "ALTER TABLE events ADD FOREIGN KEY (session_num) REFERENCES sessions (num) ON DELETE CASCADE",
    *_turn_keyed_postgres("messages", "seq"),
    *_turn_keyed_postgres("tool_calls", "call_id"),
)

#: Run by both backends after :data:`SQLITE` or :data:`POSTGRES`.
BOTH: tuple[str, ...] = (
    "CREATE INDEX events_by_last_seq ON events (session_num, last_seq) WHERE last_seq > seq",
)
