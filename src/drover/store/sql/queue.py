"""Queued messages in the SQL journal: a session's messages waiting for its running turn to end.

A message is queued under the session's lock, numbered after the session's last one. Its
``message_queued`` event (and a cancellation's ``message_cancelled``) is logged here only while
no turn of the session runs: a running turn's journal is then the log's only writer, and the
caller hands the event to that journal instead. Taking the next message to run is part of a
turn's start (:func:`drover.store.sql.turns.begin_turn`), so two processes can never both run
one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from drover.journal.records import EventRecord, QueuedMessage
from drover.journal.rules import cancelled_event, logged_event, queued_event
from drover.store.sql.common import first_value, need_session, numbered
from drover.store.sql.dialect import Dialect
from drover.store.sql.log import LAST_SEQ_PARAMS, last_seq_sql, log
from drover.store.sql.plan import Plan, Row, execute, rows


def _message(row: Row) -> QueuedMessage:
    return QueuedMessage(
        id=str(row["id"]),
        session_id=str(row["session_id"]),
        seq=int(row["seq"]),
        content=str(row["content"]),
        status=str(row["status"]),
        turn_id=None if row["turn_id"] is None else str(row["turn_id"]),
        created_at=float(row["created_at"]),
        webhook=row["webhook"],
    )


def _running(session_id: str) -> Plan[str | None]:
    found = yield from rows(
        "SELECT id FROM turns WHERE session_id = ? AND status = 'running' LIMIT 1", session_id
    )
    return str(first_value(found, "id")) if found else None


def _log_if_idle(
    d: Dialect, session_id: str, event: dict[str, Any], now: float
) -> Plan[tuple[str | None, EventRecord | None]]:
    """Log ``event`` when no turn of the session runs: ``(None, its record)``; else
    ``(the running turn's id, None)``. The caller holds the session's lock."""
    running = yield from _running(session_id)
    if running is not None:
        return running, None
    return None, (yield from log_idle(d, session_id, event, now))


def log_idle(d: Dialect, session_id: str, event: dict[str, Any], now: float) -> Plan[EventRecord]:
    """Log ``event`` outside any turn: its record. The caller holds the session's lock and
    made sure that no turn of the session runs (a running turn's journal is the log's only
    writer)."""
    found = yield from rows(f"SELECT {last_seq_sql(d)} AS seq", *[session_id] * LAST_SEQ_PARAMS)
    before = int(first_value(found, "seq"))
    seq = yield from log(d, session_id, None, event, now)
    return replace(logged_event(session_id, seq, None, event, now), prev=before)


def enqueue(
    d: Dialect,
    message_id: str,
    session_id: str,
    content: str,
    now: float,
    webhook: str | None = None,
) -> Plan[tuple[QueuedMessage, str | None, EventRecord | None]]:
    """Queue ``content`` (with the ``webhook`` its turn's end is announced to): the message,
    the id of the turn running on the session (None: none runs), and the ``message_queued``
    event logged (None when a turn runs: its journal logs it)."""
    yield from need_session(d, session_id)
    seq = yield from numbered(
        d,
        "queued_messages",
        "id, content, status, created_at, updated_at, webhook, session_id",
        "?, ?, 'queued', ?, ?, ?, ?",
        (message_id, d.clean(content), now, now, webhook, session_id),
        ("session_id = ?",),
    )
    message = QueuedMessage(
        id=message_id,
        session_id=session_id,
        seq=seq,
        content=content,
        status="queued",
        turn_id=None,
        created_at=now,
        webhook=webhook,
    )
    running, logged = yield from _log_if_idle(d, session_id, queued_event(message), now)
    return message, running, logged


def cancel(
    d: Dialect, session_id: str, message_id: str, now: float
) -> Plan[tuple[bool, str | None, EventRecord | None]]:
    """Cancel a message still queued: whether it was, the running turn's id and the
    ``message_cancelled`` event logged, as :func:`enqueue` says."""
    yield from need_session(d, session_id)
    count = yield from execute(
        "UPDATE queued_messages SET status = 'cancelled', updated_at = ? "
        "WHERE id = ? AND session_id = ? AND status = 'queued'",
        now,
        message_id,
        session_id,
    )
    if not count:
        return False, None, None
    running, logged = yield from _log_if_idle(d, session_id, cancelled_event(message_id), now)
    return True, running, logged


def log_if_idle(
    d: Dialect, session_id: str, event: dict[str, Any], now: float
) -> Plan[tuple[str | None, EventRecord | None]]:
    """Log a queue's event when no turn of the session runs (see :func:`_log_if_idle`)."""
    yield from need_session(d, session_id)
    return (yield from _log_if_idle(d, session_id, event, now))


def queued(session_id: str, status: str | None = "queued") -> Plan[list[QueuedMessage]]:
    """The session's messages in order: those still queued, or with ``status`` None all."""
    found = yield from rows(
        "SELECT * FROM queued_messages WHERE session_id = ? "
        "AND (?::text IS NULL OR status = ?::text) ORDER BY seq",
        session_id,
        status,
        status,
    )
    return [_message(r) for r in found]


def waiting_sessions(limit: int) -> Plan[list[str]]:
    """Sessions with a queued message and no running turn (a crash left them waiting)."""
    found = yield from rows(
        "SELECT DISTINCT q.session_id AS session_id FROM queued_messages q "
        "WHERE q.status = 'queued' AND NOT EXISTS (SELECT 1 FROM turns t "
        "WHERE t.session_id = q.session_id AND t.status = 'running') "
        "ORDER BY q.session_id LIMIT ?",
        limit,
    )
    return [str(r["session_id"]) for r in found]


def claim(
    d: Dialect, session_id: str, message_id: str, turn_id: str, now: float
) -> Plan[QueuedMessage | None]:
    """Take the session's next queued message for ``turn_id`` (inside its start): the message
    as it was queued; None when ``message_id`` is not the next one any more. The caller holds
    the session's lock."""
    head = yield from rows(
        "SELECT * FROM queued_messages WHERE session_id = ? AND status = 'queued' "
        "ORDER BY seq LIMIT 1",
        session_id,
    )
    if not head or str(first_value(head, "id")) != message_id:
        return None
    yield from execute(
        "UPDATE queued_messages SET status = 'started', turn_id = ?, updated_at = ? WHERE id = ?",
        turn_id,
        now,
        message_id,
    )
    return _message(head[0])
