"""The SQLite event log's writes: numbering and rows that cover ranges of numbers.

A row written with a number the journal handed out keeps it; one the store writes on its own
(recovery, a turn's settling) is numbered after every number used *or reserved*, so it can never
take a number a client may already hold (see :mod:`drover.store.numbering`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any


def next_event_seq(conn: sqlite3.Connection, session_id: str) -> int:
    row = conn.execute(
        "SELECT MAX(COALESCE((SELECT MAX(last_seq) FROM events WHERE session_id = ?), 0), "
        "seq_reserved) + 1 FROM sessions WHERE id = ?",
        (session_id, session_id),
    ).fetchone()
    return 1 if row is None else int(row[0])


def log_event(
    conn: sqlite3.Connection,
    session_id: str,
    turn_id: str | None,
    event: Mapping[str, Any],
    now: float,
    seq: int | None = None,
    last_seq: int | None = None,
    marks: str | None = None,
    part: int = 0,
) -> int:
    if seq is None:
        seq = next_event_seq(conn, session_id)
    payload = json.dumps(dict(event), ensure_ascii=False, separators=(",", ":"))
    conn.execute(
        "INSERT INTO events (session_id, seq, part, turn_id, type, payload, created_at, "
        "last_seq, marks) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            session_id,
            seq,
            part,
            turn_id,
            str(event["type"]),
            payload,
            now,
            max(seq, last_seq or seq),
            marks,
        ),
    )
    return seq


def log_text(
    conn: sqlite3.Connection,
    session_id: str,
    turn_id: str,
    event: Mapping[str, Any],
    now: float,
    first: int | None,
    last_seq: int | None,
    marks: str | None,
) -> int:
    """A coalesced text row; one that starts inside a delta an earlier row began shares that
    row's first number and takes the next ``part``."""
    part = 0
    if first is not None:
        (part,) = conn.execute(
            "SELECT COUNT(*) FROM events WHERE session_id = ? AND seq = ?", (session_id, first)
        ).fetchone()
    return log_event(conn, session_id, turn_id, event, now, first, last_seq, marks, int(part))
