"""The webhook outbox in the SQL journal: a turn's end to announce, and its deliveries.

A turn that begins with a webhook URL keeps it on its row (``turns.webhook``). Whatever ends
the turn — its own process, or recovery after that process died — writes one outbox row in the
same transaction (:func:`enqueue`): the delivery's id and the exact body to send, so a turn
never ends without its announcement, nor is announced without ending. Deliverers take due rows
under a claim that expires (:func:`claim_due`): a deliverer that dies mid-delivery leaves its
rows to the next one once the claim runs out (at once, when the next one sees the claimer was
a process of its machine that is gone), which is why delivery is at least once (the id lets
the receiver drop a repeat).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection

from drover.journal.records import Delivery
from drover.store.sql.dialect import Dialect
from drover.store.sql.plan import Plan, execute, rows
from drover.store.sql.rows import decoded_json


def enqueue(d: Dialect, turn_id: str, now: float) -> Plan[None]:
    """Write the outbox row of the turn that just ended (in this transaction), when it began
    with a webhook; the row's body is the turn's end as the receiver gets it."""
    found = yield from rows(
        "SELECT session_id, status, reason, error, usage, ended_at, webhook FROM turns "
        "WHERE id = ? AND webhook IS NOT NULL",
        turn_id,
    )
    if not found:
        return
    turn = found[0]
    delivery_id = uuid.uuid4().hex
    usage = turn["usage"]
    body = {
        "id": delivery_id,
        "type": "turn.ended",
        "session_id": turn["session_id"],
        "turn_id": turn_id,
        "status": turn["status"],
        "reason": turn["reason"],
        "error": turn["error"],
        "usage": None if usage is None else decoded_json(usage),
        "ended_at": turn["ended_at"],
    }
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    yield from execute(
        "INSERT INTO webhook_outbox (id, session_id, turn_id, url, body, next_attempt_at, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        *(delivery_id, turn["session_id"], turn_id, turn["webhook"], d.text(text), now, now),
    )


def claim_due(
    d: Dialect,
    claimer: str,
    now: float,
    hold_seconds: float,
    limit: int,
    alive: Callable[[str], bool],
    busy: Collection[str] = (),
) -> Plan[list[Delivery]]:
    """Claim, for ``hold_seconds``, the oldest due delivery not held by a live claim of each
    of up to ``limit`` receivers (URLs), those whose deliveries are the longest due first,
    leaving out the receivers in ``busy`` (the claimer is sending to them now); run it in a
    write transaction. One delivery per receiver: a deliverer sends to each receiver one at a
    time, and to different receivers side by side. A claim runs out at its time, or at once
    when its claimer is not ``alive`` (a process of this machine that died mid-delivery: a
    restart sends it again without waiting for the claim's end)."""
    held = yield from rows(
        "SELECT DISTINCT claimed_by FROM webhook_outbox WHERE delivered_at IS NULL "
        "AND failed_at IS NULL AND claimed_until > ? AND next_attempt_at <= ?",
        now,
        now,
    )
    for row in held:
        if not alive(str(row["claimed_by"])):
            yield from execute(
                "UPDATE webhook_outbox SET claimed_by = NULL, claimed_until = NULL "
                "WHERE claimed_by = ? AND delivered_at IS NULL AND failed_at IS NULL",
                row["claimed_by"],
            )
    skipped = sorted(busy)
    others = f" AND url NOT IN ({', '.join('?' for _ in skipped)})" if skipped else ""
    receivers = yield from rows(
        f"SELECT url, MIN(next_attempt_at) AS due FROM webhook_outbox WHERE {_FREE}{others} "
        "GROUP BY url ORDER BY due, url LIMIT ?",
        now,
        now,
        *skipped,
        limit,
    )
    out: list[Delivery] = []
    for receiver in receivers:
        found = yield from rows(
            f"SELECT id FROM webhook_outbox WHERE url = ? AND {_FREE} "
            f"ORDER BY next_attempt_at, id LIMIT 1{_skip_locked(d)}",
            receiver["url"],
            now,
            now,
        )
        for row in found:
            claimed = yield from _claim(str(row["id"]), claimer, now, hold_seconds)
            out.extend(claimed)
    return out


#: A delivery due and not claimed (parameters: now, twice).
_FREE = (
    "delivered_at IS NULL AND failed_at IS NULL AND next_attempt_at <= ? "
    "AND (claimed_until IS NULL OR claimed_until <= ?)"
)


def _claim(delivery_id: str, claimer: str, now: float, hold_seconds: float) -> Plan[list[Delivery]]:
    """Claim one delivery, unless another claimer took it meanwhile."""
    taken = yield from execute(
        "UPDATE webhook_outbox SET claimed_by = ?, claimed_until = ? WHERE id = ? "
        "AND delivered_at IS NULL AND failed_at IS NULL "
        "AND (claimed_until IS NULL OR claimed_until <= ?)",
        claimer,
        now + hold_seconds,
        delivery_id,
        now,
    )
    if not taken:
        return []
    claimed = yield from rows(
        "SELECT id, session_id, turn_id, url, body, attempts FROM webhook_outbox WHERE id = ?",
        delivery_id,
    )
    return [
        Delivery(
            id=str(c["id"]),
            session_id=str(c["session_id"]),
            turn_id=str(c["turn_id"]),
            url=str(c["url"]),
            body=str(c["body"]),
            attempts=int(c["attempts"]),
        )
        for c in claimed
    ]


def _skip_locked(d: Dialect) -> str:
    # PostgreSQL: deliverers in several processes take different rows instead of queueing on
    # one another's (SQLite's write transaction holds the whole file anyway).
    return " FOR UPDATE SKIP LOCKED" if d.casts else ""


def settle_delivery(
    delivery_id: str,
    claimer: str,
    now: float,
    *,
    error: str | None,
    retry_at: float | None,
) -> Plan[int]:
    """Record an attempt by ``claimer`` (who must still hold the claim): delivered when
    ``error`` is None, else retried at ``retry_at`` or, with None, given up. The rows
    changed (0: the claim was lost, another deliverer has it now)."""
    if error is None:
        return execute(
            "UPDATE webhook_outbox SET delivered_at = ?, attempts = attempts + 1, "
            "claimed_by = NULL, claimed_until = NULL, last_error = NULL "
            "WHERE id = ? AND claimed_by = ?",
            now,
            delivery_id,
            claimer,
        )
    return execute(
        "UPDATE webhook_outbox SET attempts = attempts + 1, last_error = ?, "
        "next_attempt_at = COALESCE(?::double precision, next_attempt_at), "
        "failed_at = CASE WHEN ?::double precision IS NULL THEN ?::double precision END, "
        "claimed_by = NULL, claimed_until = NULL WHERE id = ? AND claimed_by = ?",
        error[:500],
        retry_at,
        retry_at,
        now,
        delivery_id,
        claimer,
    )


def deliveries(turn_id: str | None = None) -> Plan[list[dict[str, object]]]:
    """The outbox's rows (of one turn, or all), oldest first, as plain values."""
    found = yield from rows(
        "SELECT id, session_id, turn_id, url, attempts, delivered_at, failed_at, last_error "
        "FROM webhook_outbox WHERE (?::text IS NULL OR turn_id = ?::text) "
        "ORDER BY created_at, id",
        turn_id,
        turn_id,
    )
    return [{key: r[key] for key in _COLUMNS} for r in found]


_COLUMNS = (
    "id",
    "session_id",
    "turn_id",
    "url",
    "attempts",
    "delivered_at",
    "failed_at",
    "last_error",
)
