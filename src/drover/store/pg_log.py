"""The PostgreSQL event log's writes: numbering and rows that cover ranges of numbers.

As :mod:`drover.store.sqlite_log`: a number the journal handed out is kept; the store numbers
its own rows after every number used or reserved. The caller holds the session's row lock.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from psycopg.types.json import Jsonb

from drover.store.pg_conn import Conn

# An escaped NUL in JSON text, not preceded by an escaped backslash.
_JSON_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def dumps(value: Any) -> str:
    """JSON for a ``jsonb`` column, which cannot hold NUL (it becomes U+FFFD)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _JSON_NUL.sub(r"\1\\ufffd", text) if "\\u0000" in text else text


def jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value, dumps=dumps)


async def _one(conn: Conn, sql: str, params: tuple[Any, ...]) -> int:
    cur = await conn.execute(sql, params)
    row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def next_event_seq(conn: Conn, session_id: str) -> int:
    return await _one(
        conn,
        "SELECT GREATEST(COALESCE((SELECT MAX(last_seq) FROM events WHERE session_id = %s), 0), "
        "COALESCE((SELECT seq_reserved FROM sessions WHERE id = %s), 0)) + 1 AS n",
        (session_id, session_id),
    )


async def log_event(
    conn: Conn,
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
        seq = await next_event_seq(conn, session_id)
    await conn.execute(
        "INSERT INTO events (session_id, seq, part, turn_id, type, payload, created_at, "
        "last_seq, marks) VALUES (%s, %s, %s, %s::text, %s, %s::jsonb, %s, %s, %s)",
        (
            session_id,
            seq,
            part,
            turn_id,
            str(event["type"]),
            jsonb(dict(event)),
            now,
            max(seq, last_seq or seq),
            marks,
        ),
    )
    return seq


async def log_text(
    conn: Conn,
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
        part = await _one(
            conn,
            "SELECT COUNT(*) AS n FROM events WHERE session_id = %s AND seq = %s",
            (session_id, first),
        )
    return await log_event(conn, session_id, turn_id, event, now, first, last_seq, marks, part)
