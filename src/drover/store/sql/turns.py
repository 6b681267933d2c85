"""Turns in the SQL journal: starting one, holding its lease, ending it, recovering the abandoned.

A turn starts ``running`` at the end of its session, leased to its process; only one turn of a
session runs at a time (checked and created under the session's lock). A turn that ends is
*settled* in the same transaction: its open tool calls are closed ``interrupted`` and its
left-over text deltas become partial messages, both logged, so nothing stays "in progress".

Recovery reads the candidates without locks, then per turn locks the session and re-checks that
the turn's owner and lease are unchanged (PostgreSQL also skips a turn locked by a renewal in
flight): processes recovering at once recover each orphan exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from drover.core.events import AssistantMessage, Error, Incomplete, ToolStateChanged, event_to_dict
from drover.core.messages import Message, Usage, message_to_dict
from drover.errors import QueueChangedError, SessionBusyError, StoreError
from drover.journal.owners import holder_gone, owner_alive
from drover.journal.records import EventRecord, StoredMessage, TurnRecord
from drover.journal.rules import (
    ORPHAN_ERROR,
    interrupted_call,
    logged_event,
    partial_messages,
    session_title,
)
from drover.journal.writes import EndTurn
from drover.store.sql import holds, queue
from drover.store.sql.common import (
    TERMINAL_SQL,
    Held,
    add_message,
    first_value,
    lock_session,
    need_session,
    numbered,
    turn_session,
)
from drover.store.sql.dialect import Dialect
from drover.store.sql.keys import TURN_NUM
from drover.store.sql.log import LAST_SEQ_PARAMS, last_seq_sql, log, running_usage
from drover.store.sql.outbox import enqueue
from drover.store.sql.plan import Plan, Row, atomic, execute, rows
from drover.store.sql.result_refs import SessionOutputs
from drover.store.sql.rows import turn_from_row
from drover.store.sql.text import FreedSpace, deltas, retire
from drover.store.sql.work import turn_messages


def begin_turn(
    d: Dialect,
    turn_id: str,
    session_id: str,
    user_message: Message | None,
    owner: str,
    lease_seconds: float,
    now: float,
    webhook: str | None = None,
    claim: str | None = None,
    hold: str | None = None,
    alive: Callable[[str], bool] = owner_alive,
) -> Plan[TurnRecord]:
    """A new running turn; with ``claim``, the turn of that queued message, which must be
    the session's next one (taken in the same transaction, else ``QueueChangedError``; its
    own webhook, if it named one, replaces ``webhook``). Refused while another turn runs, or
    while the session is held other than by ``hold`` (:mod:`drover.store.sql.holds`); the
    turn takes over a hold of ``hold``'s."""
    body = None if user_message is None else d.json(message_to_dict(user_message))
    yield from need_session(d, session_id)
    running = yield from rows(
        "SELECT id FROM turns WHERE session_id = ? AND status = 'running' LIMIT 1", session_id
    )
    if running:
        raise SessionBusyError(session_id, str(first_value(running, "id")))
    if (yield from holds.check(session_id, hold, now, alive)):
        assert hold is not None
        yield from holds.drop(session_id, hold)
    if claim is not None:
        taken = yield from queue.claim(d, session_id, claim, turn_id, now)
        if taken is None:
            raise QueueChangedError(f"queued message {claim} is no longer the next to run")
        webhook = taken.webhook or webhook
    yield from numbered(
        d,
        "turns",
        "id, status, user_message, owner, lease_expires_at, created_at, updated_at, webhook, "
        "session_id",
        "?, ?, ?::jsonb, ?, ?, ?, ?, ?, ?",
        (turn_id, "running", body, owner, now + lease_seconds, now, now, webhook, session_id),
        ("session_id = ?",),
    )
    yield from execute(
        "UPDATE sessions SET updated_at = ?, title = COALESCE(title, ?) WHERE id = ?",
        now,
        d.clean(session_title(user_message)),
        session_id,
    )
    found = yield from rows("SELECT * FROM turns WHERE id = ?", turn_id)
    return turn_from_row(found[0])


def renew_lease(turn_id: str, owner: str, lease_seconds: float, now: float) -> Plan[int]:
    """Extend the lease of a turn still running under ``owner``; the rows renewed (0 or 1)."""
    return execute(
        "UPDATE turns SET lease_expires_at = ?, updated_at = ? "
        "WHERE id = ? AND owner = ? AND status = 'running'",
        now + lease_seconds,
        now,
        turn_id,
        owner,
    )


def settle(
    d: Dialect,
    space: FreedSpace,
    session_id: str,
    turn_id: str,
    now: float,
    logged: list[EventRecord] | None = None,
    first_seq: int | None = None,
) -> Plan[bool]:
    """Close the turn's open tool calls and fold its left-over text deltas into partial
    messages, logging both (into ``logged``, numbered from ``first_seq`` if given); returns
    whether the turn holds any message. The caller holds the session's lock."""
    out = [] if logged is None else logged

    def logs(event: dict[str, Any]) -> Plan[None]:
        seq = None if first_seq is None else first_seq + len(out)
        seq = yield from log(d, session_id, turn_id, event, now, seq)
        out.append(logged_event(session_id, seq, turn_id, event, now))

    calls = yield from rows(
        "SELECT call_id, call_index, name, state, output, read_only FROM tool_calls "
        f"WHERE turn_num = {TURN_NUM} AND state NOT IN ({TERMINAL_SQL}) "
        "ORDER BY step, call_index",
        turn_id,
    )
    for call in calls:
        text, unknown = interrupted_call(call["state"], bool(call["read_only"]))
        output = call["output"] or text
        yield from execute(
            "UPDATE tool_calls SET state = 'interrupted', output = ?, is_error = TRUE, "
            f"outcome_unknown = ?, updated_at = ? WHERE turn_num = {TURN_NUM} AND call_id = ?",
            output,
            unknown,
            now,
            turn_id,
            call["call_id"],
        )
        closed = ToolStateChanged(
            call_id=call["call_id"],
            call_index=call["call_index"],
            name=call["name"],
            state="interrupted",
            output=output,
            is_error=True,
            outcome_unknown=unknown,
        )
        yield from logs(event_to_dict(closed))
    for message in partial_messages((yield from deltas(turn_id))):
        yield from add_message(d, turn_id, message, True, now)
        yield from logs(event_to_dict(AssistantMessage(message=message, partial=True)))
    yield from retire(d, space, session_id, turn_id, None, now)
    held = yield from rows(
        f"SELECT EXISTS (SELECT 1 FROM messages WHERE turn_num = {TURN_NUM}) AS held", turn_id
    )
    return bool(first_value(held, "held"))


def end_turn(
    d: Dialect, space: FreedSpace, w: EndTurn, now: float, held: Held | None = None
) -> Plan[list[EventRecord]]:
    """See :class:`~drover.journal.writes.EndTurn`."""
    if w.status == "running":
        raise StoreError("a turn cannot end as running")
    session_id = yield from turn_session(d, w.turn_id, w.owner, held)
    if held is not None:
        held.forget_turn(w.turn_id)  # ended below: nothing after may write to it
    if w.first_seq is not None:
        before = w.first_seq - 1
    else:
        found = yield from rows(f"SELECT {last_seq_sql(d)} AS seq", *[session_id] * LAST_SEQ_PARAMS)
        before = int(first_value(found, "seq"))
    logged: list[EventRecord] = []
    yield from settle(d, space, session_id, w.turn_id, now, logged, w.first_seq)
    yield from execute(
        "UPDATE turns SET status = ?, reason = ?, error = ?, usage = ?::jsonb, "
        "ended_at = ?, updated_at = ?, lease_expires_at = NULL WHERE id = ?",
        w.status,
        d.clean(w.reason),
        d.clean(w.error),
        None if w.usage is None else d.json(w.usage.to_dict()),
        now,
        now,
        w.turn_id,
    )
    # Announced in the transaction that ends it: never ended without, nor announced before.
    yield from enqueue(d, w.turn_id, now)
    if w.event is not None:
        seq = None if w.first_seq is None else w.first_seq + len(logged)
        seq = yield from log(d, session_id, w.turn_id, w.event, now, seq)
        logged.append(logged_event(session_id, seq, w.turn_id, w.event, now))
    if w.first_seq is None:
        yield from execute("UPDATE sessions SET updated_at = ? WHERE id = ?", now, session_id)
    else:
        # The journal numbered the turn and hands out nothing after its end: its
        # reservation shrinks to the numbers used, so the next turn goes on from them.
        yield from execute(
            "UPDATE sessions SET updated_at = ?, seq_reserved = ? WHERE id = ?",
            now,
            w.first_seq + len(logged) - 1,
            session_id,
        )
    out = []
    for record in logged:
        out.append(replace(record, prev=before))
        before = record.end_seq
    return out


def turns(session_id: str) -> Plan[list[TurnRecord]]:
    found = yield from rows("SELECT * FROM turns WHERE session_id = ? ORDER BY seq", session_id)
    return [turn_from_row(r) for r in found]


def get_turn(turn_id: str) -> Plan[TurnRecord | None]:
    found = yield from rows("SELECT * FROM turns WHERE id = ?", turn_id)
    return turn_from_row(found[0]) if found else None


def last_turn(session_id: str) -> Plan[TurnRecord | None]:
    found = yield from rows(
        "SELECT * FROM turns WHERE session_id = ? ORDER BY seq DESC LIMIT 1", session_id
    )
    return turn_from_row(found[0]) if found else None


def turns_with_messages(
    session_id: str, now: float
) -> Plan[list[tuple[TurnRecord, list[StoredMessage]]]]:
    """The session's turns, each with its messages; run it in a snapshot."""
    found = yield from rows("SELECT * FROM turns WHERE session_id = ? ORDER BY seq", session_id)
    outputs = SessionOutputs(session_id)
    out = []
    for row in found:
        turn = turn_from_row(row)
        out.append((turn, (yield from turn_messages(turn.id, now, outputs))))
    return out


#: The unfinished turns after the session's last completed one not rewound (the session's id,
#: twice).
_PENDING = (
    "session_id = ? AND NOT discarded "
    "AND status IN ('incomplete', 'failed', 'interrupted') AND seq > (SELECT COALESCE(MAX(seq), "
    "0) FROM turns WHERE session_id = ? AND status = 'completed' AND NOT discarded)"
)


def discard_pending(d: Dialect, session_id: str, now: float) -> Plan[list[str]]:
    if not (yield from lock_session(d, session_id)):
        return []
    found = yield from rows(
        f"SELECT id FROM turns WHERE {_PENDING} ORDER BY seq", session_id, session_id
    )
    if found:
        yield from execute(
            f"UPDATE turns SET discarded = TRUE, updated_at = ? WHERE {_PENDING}",
            now,
            session_id,
            session_id,
        )
    return [str(r["id"]) for r in found]


def recover_orphans(
    d: Dialect,
    space: FreedSpace,
    alive: Callable[[str], bool],
    session_id: str | None,
    clock: Callable[[], float],
) -> Plan[list[str]]:
    """Interrupt the ``running`` turns (of ``session_id``, or of every session) whose lease
    expired or whose owner is not ``alive``, each in a write transaction of its own; their
    ids."""
    now = clock()
    running = yield from rows(
        "SELECT id, session_id, owner, lease_expires_at FROM turns "
        "WHERE status = 'running' AND (?::text IS NULL OR session_id = ?::text) "
        f"ORDER BY {d.creation_order}",
        session_id,
        session_id,
    )
    recovered: list[str] = []
    for row in running:
        if not holder_gone(row["owner"], row["lease_expires_at"], now, alive):
            continue
        if (yield from atomic(_recover_one(d, space, row, now))):
            recovered.append(str(row["id"]))
    return recovered


def _recover_one(d: Dialect, space: FreedSpace, seen: Row, now: float) -> Plan[bool]:
    turn_id, session_id = str(seen["id"]), str(seen["session_id"])
    yield from lock_session(d, session_id)
    # Renewed or finished (or recovered by another process) since it was read, or being
    # renewed right now (locked): leave it.
    still = yield from rows(
        "SELECT 1 AS one FROM turns WHERE id = ? AND status = 'running' "
        f"AND owner {d.same} ?::text AND lease_expires_at {d.same} ?::double precision"
        f"{d.lock_skip}",
        turn_id,
        seen["owner"],
        seen["lease_expires_at"],
    )
    if not still:
        return False
    worked = yield from settle(d, space, session_id, turn_id, now)
    # The use the dead process last journaled (the API charged for it), marked partial.
    usage = (yield from running_usage(d, session_id, turn_id)) or Usage(partial=True)
    yield from execute(
        "UPDATE turns SET status = 'interrupted', reason = 'interrupted', error = ?, "
        "usage = ?::jsonb, ended_at = ?, updated_at = ?, lease_expires_at = NULL WHERE id = ?",
        ORPHAN_ERROR,
        d.json(usage.to_dict()),
        now,
        now,
        turn_id,
    )
    yield from enqueue(d, turn_id, now)
    end = Incomplete if worked else Error
    ended = end(reason="interrupted", error=ORPHAN_ERROR, usage=usage)
    yield from log(d, session_id, turn_id, event_to_dict(ended), now)
    return True
