"""Sessions in the SQL journal, and the permissions granted in them: created, read, changed."""

from __future__ import annotations

from drover.errors import SessionBusyError, StoreError
from drover.journal.records import GrantRecord, SessionRecord
from drover.store.sql.common import lock_session, need_session
from drover.store.sql.dialect import Dialect
from drover.store.sql.files import drop_unused_blobs
from drover.store.sql.plan import Plan, execute, rows
from drover.store.sql.rows import session_from_row
from drover.store.sql.text import RECLAIM_CHECK_BYTES, FreedSpace, reclaim

#: Sorts after every character an id may continue with: the end of a prefix's range.
_LAST_CHAR = "\U0010ffff"


def create_session(record: SessionRecord) -> Plan[SessionRecord]:
    if not (yield from _insert(record)):
        raise StoreError(f"session {record.id} already exists")
    return record


def open_session(record: SessionRecord) -> Plan[tuple[SessionRecord, bool]]:
    """The session ``record.id``: the stored one, or ``record`` inserted — with its owner, in
    this transaction — when none is; and whether it was inserted now. Two requests opening one
    new id at once thus get one session, whose owner is the inserter's, never a failed insert
    nor a session seen without its owner (PostgreSQL: the second insert waits for the first's
    transaction, then finds its row)."""
    for _ in range(3):  # (again when the stored one was deleted in between)
        if (yield from _insert(record)):
            return record, True
        found = yield from rows("SELECT * FROM sessions WHERE id = ?", record.id)
        if found:
            return session_from_row(found[0]), False
    raise StoreError(f"session {record.id} is being created and deleted by others: try again")


def _insert(record: SessionRecord) -> Plan[int]:
    """Insert the session unless its id is taken; the rows inserted (0 or 1)."""
    return execute(
        "INSERT INTO sessions (id, created_at, updated_at, workdir, model, title, owner) "
        "VALUES (?, ?, ?, ?, ?, NULL, ?) ON CONFLICT (id) DO NOTHING",
        record.id,
        record.created_at,
        record.updated_at,
        record.workdir,
        record.model,
        record.owner,
    )


def get_session(session_id: str) -> Plan[SessionRecord | None]:
    found = yield from rows("SELECT * FROM sessions WHERE id = ?", session_id)
    return session_from_row(found[0]) if found else None


def list_sessions(d: Dialect, limit: int, owner: str | None) -> Plan[list[SessionRecord]]:
    """Most recently updated first; with ``owner``, only that owner's sessions."""
    found = yield from rows(
        "SELECT * FROM sessions WHERE ?::text IS NULL OR owner = ?::text "
        f"ORDER BY updated_at DESC, {d.creation_order} DESC LIMIT ?",
        owner,
        owner,
        limit,
    )
    return [session_from_row(r) for r in found]


def latest_session(d: Dialect, workdir: str) -> Plan[SessionRecord | None]:
    found = yield from rows(
        "SELECT * FROM sessions WHERE workdir = ? "
        f"ORDER BY updated_at DESC, {d.creation_order} DESC LIMIT 1",
        workdir,
    )
    return session_from_row(found[0]) if found else None


def set_session_model(session_id: str, model: str, now: float) -> Plan[None]:
    count = yield from execute(
        "UPDATE sessions SET model = ?, updated_at = ? WHERE id = ?", model, now, session_id
    )
    if count == 0:
        raise StoreError(f"no session {session_id}")


def find_sessions(d: Dialect, prefix: str, limit: int) -> Plan[list[SessionRecord]]:
    # A range on the id in byte order (an index on it: the primary key on SQLite, the
    # "C"-collated one of 0007 on PostgreSQL), then the exact test: a locale's order could
    # put a longer id outside the range.
    order = d.byte_order
    found = yield from rows(
        f"SELECT * FROM sessions WHERE id{order} >= ?::text AND id{order} < ?::text "
        f"AND substr(id, 1, ?) = ?::text ORDER BY id{order} LIMIT ?",
        prefix,
        prefix + _LAST_CHAR,
        len(prefix),
        prefix,
        limit,
    )
    return [session_from_row(r) for r in found]


def rename_session(d: Dialect, session_id: str, title: str) -> Plan[None]:
    count = yield from execute(
        "UPDATE sessions SET title = ? WHERE id = ?", d.clean(title), session_id
    )
    if count == 0:
        raise StoreError(f"no session {session_id}")


def delete_session(d: Dialect, session_id: str, space: FreedSpace) -> Plan[bool]:
    if not (yield from lock_session(d, session_id)):
        return False
    running = yield from rows(
        "SELECT id FROM turns WHERE session_id = ? AND status = 'running' LIMIT 1", session_id
    )
    if running:
        raise SessionBusyError(session_id, str(running[0]["id"]))
    # Everything else goes with the row: every table that holds a session's content
    # references it, or one of its turns, ON DELETE CASCADE.
    yield from execute("DELETE FROM sessions WHERE id = ?", session_id)
    yield from drop_unused_blobs(d)  # (a file's content is kept once, for every session)
    space.freed = max(space.freed, RECLAIM_CHECK_BYTES)
    yield from reclaim(d, space)
    return True


# -- permission grants ----------------------------------------------------------------------


def add_grant(d: Dialect, session_id: str, rule: str, now: float) -> Plan[None]:
    yield from need_session(d, session_id)
    yield from execute(
        "INSERT INTO permission_grants (session_id, rule, created_at) VALUES (?, ?, ?) "
        "ON CONFLICT (session_id, rule) DO NOTHING",
        session_id,
        rule,
        now,
    )


def grants(session_id: str) -> Plan[list[GrantRecord]]:
    found = yield from rows(
        "SELECT rule, created_at FROM permission_grants WHERE session_id = ? "
        "ORDER BY created_at, rule",
        session_id,
    )
    return [
        GrantRecord(session_id=session_id, rule=str(r["rule"]), created_at=r["created_at"])
        for r in found
    ]


def revoke_grants(session_id: str, rule: str | None) -> Plan[list[str]]:
    found = yield from rows(
        "SELECT rule FROM permission_grants WHERE session_id = ? "
        "AND (?::text IS NULL OR rule = ?::text) ORDER BY created_at, rule",
        session_id,
        rule,
        rule,
    )
    yield from execute(
        "DELETE FROM permission_grants WHERE session_id = ? "
        "AND (?::text IS NULL OR rule = ?::text)",
        session_id,
        rule,
        rule,
    )
    return [str(r["rule"]) for r in found]
