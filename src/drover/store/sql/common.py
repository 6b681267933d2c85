"""What every SQL plan of the store builds on: locking a session or a running turn, numbering a
row, storing a message.

Every write that touches a session's content first locks that session (SQLite: the write
transaction holds the file; PostgreSQL: ``SELECT … FOR UPDATE`` of its row), then reads
``max(seq) + 1`` and inserts under that lock, so event, turn and message numbers stay contiguous
whatever the number of writers. Locks are taken in the order session → turn, so writers cannot
deadlock. A :class:`Held` remembers what one transaction locked and checked already, so the
writes of a batch lock and check each session and turn once.
"""

from __future__ import annotations

import functools
from typing import Any

from drover.core.events import TERMINAL_TOOL_STATES
from drover.core.messages import Message
from drover.errors import StoreError
from drover.journal.rules import check_writable
from drover.store.sql.dialect import Dialect
from drover.store.sql.keys import TURN_NUM
from drover.store.sql.plan import Plan, Row, execute, rows
from drover.store.sql.result_refs import stored_body

#: The terminal tool-call states, as a SQL list.
TERMINAL_SQL = ", ".join(f"'{state}'" for state in sorted(TERMINAL_TOOL_STATES))


def first_value(found: list[Row], column: str) -> Any:
    return found[0][column]


class Held:
    """What one write transaction has locked and checked already — sessions, and running
    turns (with the owner they were checked under) to their session — so that the writes of a
    batch lock and check each once. A plan given none checks for itself. It also keeps the
    numbers (:mod:`drover.store.sql.keys`) of the sessions and turns it checked, by id, so that the
    batch's rows name them without looking each up again."""

    __slots__ = ("session_nums", "turn_nums", "turns")

    def __init__(self) -> None:
        self.turns: dict[tuple[str, str | None], str] = {}
        #: The sessions locked and checked, and the turns checked, to their numbers.
        self.session_nums: dict[str, int] = {}
        self.turn_nums: dict[str, int] = {}

    def forget_turn(self, turn_id: str) -> None:
        """The turn ended in this transaction: a later write must check it again (and fail)."""
        for key in [k for k in self.turns if k[0] == turn_id]:
            del self.turns[key]


def _lock_session(d: Dialect, session_id: str) -> Plan[int | None]:
    found = yield from rows(f"SELECT s.num FROM sessions s WHERE s.id = ?{d.lock}", session_id)
    return int(found[0]["num"]) if found else None


def lock_session(d: Dialect, session_id: str) -> Plan[bool]:
    """Lock the session's row until the transaction ends; whether it exists."""
    return (yield from _lock_session(d, session_id)) is not None


def need_session(d: Dialect, session_id: str, held: Held | None = None) -> Plan[None]:
    """Lock the session, which must exist."""
    if held is not None and session_id in held.session_nums:
        return
    num = yield from _lock_session(d, session_id)
    if num is None:
        raise StoreError(f"no session {session_id}")
    if held is not None:
        held.session_nums[session_id] = num


def turn_num(held: Held | None, turn_id: str) -> int | None:
    """The turn's number if ``held`` checked the turn (None: look it up by id)."""
    return None if held is None else held.turn_nums.get(turn_id)


def turn_session(
    d: Dialect, turn_id: str, owner: str | None = None, held: Held | None = None
) -> Plan[str]:
    """Lock the session of a turn that is still running (under ``owner``, when given): the
    only kind of turn whose work may still be written. Returns the session's id."""
    if held is not None and (turn_id, owner) in held.turns:
        return held.turns[turn_id, owner]
    found = yield from rows(
        "SELECT s.id, s.num AS session_num, t.num AS turn_num, t.status, t.owner FROM turns t "
        f"JOIN sessions s ON s.id = t.session_id WHERE t.id = ?{d.lock}",
        turn_id,
    )
    if not found:
        raise StoreError(f"no turn {turn_id}")
    row = found[0]
    check_writable(turn_id, str(row["status"]), row["owner"], owner)
    session_id = str(row["id"])
    if held is not None:
        held.turns[turn_id, owner] = session_id
        held.session_nums[session_id] = int(row["session_num"])
        held.turn_nums[turn_id] = int(row["turn_num"])
    return session_id


@functools.cache
def _numbered_sql(
    table: str, columns: str, values: str, scope: tuple[str, ...]
) -> tuple[str, str, str]:
    """The statements of :func:`numbered`: the insert that numbers its row and returns the
    number; or the read of the number, then the insert (built once each)."""
    where = " AND ".join(scope)
    return (
        f"INSERT INTO {table} ({columns}, seq) SELECT {values}, COALESCE(MAX(seq), 0) + 1 "
        f"FROM {table} WHERE {where} RETURNING seq",
        f"SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM {table} WHERE {where}",
        f"INSERT INTO {table} ({columns}, seq) VALUES ({values}, ?)",
    )


def numbered(
    d: Dialect,
    table: str,
    columns: str,
    values: str,
    params: tuple[Any, ...],
    scope: tuple[str, ...],
) -> Plan[int]:
    """Insert a row into ``table`` numbered ``max(seq) + 1`` among the rows that share its
    ``scope`` (conditions on the last of ``columns``, one parameter each, so their values end
    ``params``); its number.
    The caller holds the session's lock, so no other writer takes the same number."""
    returning, select, insert = _numbered_sql(table, columns, values, scope)
    scoped = params[-len(scope) :]
    if d.returning:
        found = yield from rows(returning, *params, *scoped)
        return int(first_value(found, "seq"))
    found = yield from rows(select, *scoped)
    seq = int(first_value(found, "seq"))
    yield from execute(insert, *params, seq)
    return seq


def add_message(
    d: Dialect,
    turn_id: str,
    message: Message,
    partial: bool,
    now: float,
    held: Held | None = None,
) -> Plan[int]:
    """Store a message as the turn's next (its results' outputs left in their calls' rows,
    :mod:`drover.store.sql.result_refs`); its seq in the turn."""
    num = turn_num(held, turn_id)
    body = yield from stored_body(d, turn_id, message, num)
    turn, value = (TURN_NUM, turn_id) if num is None else ("?", num)
    return (
        yield from numbered(
            d,
            "messages",
            "role, body, partial, created_at, turn_num",
            f"?, ?, ?, ?, {turn}",
            (message.role, d.json_text(body), partial, now, value),
            (f"turn_num = {turn}",),
        )
    )
