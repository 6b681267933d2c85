"""Rows to records: what a SQL backend reads back, as the records of :mod:`drover.journal.records`.

A row is anything indexable by column name (``sqlite3.Row``, psycopg's dict row); a JSON column
is text in SQLite and already decoded from PostgreSQL's ``jsonb``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import accumulate, islice
from operator import sub
from typing import Any

from drover.core.messages import Usage, message_from_dict
from drover.journal.records import (
    EventRecord,
    SessionRecord,
    StoredMessage,
    ToolCallRecord,
    TurnRecord,
)
from drover.journal.rules import flushed_text_event
from drover.store.sql.log_shapes import unpack
from drover.store.sql.plan import Row

#: The decoder's C scanner: ``json.loads`` less its wrapper (two regex matches and a few calls,
#: ~1.5 µs a value, most of the cost of a small one), for the text the store itself wrote.
_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _json(value: Any) -> Any:
    """A JSON column's value: text in SQLite, already decoded from a PostgreSQL ``jsonb``."""
    if isinstance(value, str):
        try:
            decoded, end = _scan(value, 0)
        except StopIteration:  # not a JSON value where it starts: json.loads says why
            return json.loads(value)
        # Anything after the value (white space, or not JSON): json.loads takes or refuses it.
        return decoded if end == len(value) else json.loads(value)
    return json.loads(value) if isinstance(value, bytes) else value


json_value = _json


def session_from_row(row: Row) -> SessionRecord:
    return SessionRecord(
        id=str(row["id"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
        workdir=str(row["workdir"]),
        model=str(row["model"]),
        title=row["title"],
        owner=row["owner"],
        forked_from=row["forked_from"],
        forked_turn=row["forked_turn"],
    )


def decoded_json(value: Any) -> Any:
    """A JSON column's value, decoded (text in SQLite, ``jsonb`` in PostgreSQL)."""
    return _json(value)


def turn_from_row(row: Row) -> TurnRecord:
    user, usage = row["user_message"], row["usage"]
    return TurnRecord(
        id=str(row["id"]),
        session_id=str(row["session_id"]),
        seq=int(row["seq"]),
        status=row["status"],
        user_message=None if user is None else message_from_dict(_json(user)),
        reason=row["reason"],
        error=row["error"],
        usage=None if usage is None else Usage.from_dict(_json(usage)),
        owner=row["owner"],
        lease_expires_at=row["lease_expires_at"],
        discarded=bool(row["discarded"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
        ended_at=row["ended_at"],
        rewound_at=row["rewound_at"],
    )


#: A ``tool_calls`` row's columns (``tc``) that :func:`tool_call_from_row` reads besides the
#: turn's id.
CALL_COLUMNS = (
    "tc.call_id, tc.step, tc.call_index, tc.name, tc.state, tc.input, tc.output, tc.is_error, "
    "tc.outcome_unknown, tc.read_only, tc.created_at, tc.updated_at"
)


def tool_call_from_row(row: Row) -> ToolCallRecord:
    raw_input = row["input"]
    return ToolCallRecord(
        turn_id=str(row["turn_id"]),
        call_id=str(row["call_id"]),
        step=int(row["step"]),
        call_index=int(row["call_index"]),
        name=str(row["name"]),
        state=row["state"],
        input=None if raw_input is None else _json(raw_input),
        output=row["output"],
        is_error=bool(row["is_error"]),
        outcome_unknown=bool(row["outcome_unknown"]),
        read_only=bool(row["read_only"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
    )


def stored_message(turn_id: str, row: Row, body: Any) -> StoredMessage:
    """A ``messages`` row of the turn ``turn_id``, with its body decoded (and its outputs put
    back) by the caller."""
    return StoredMessage(
        turn_id=turn_id,
        seq=int(row["seq"]),
        message=message_from_dict(body),
        partial=bool(row["partial"]),
        created_at=float(row["created_at"]),
    )


def event_from_row(session_id: str, row: Row) -> EventRecord:
    """A log row of the session ``session_id`` (:data:`~drover.store.sql.log.EVENT_COLUMNS`)."""
    seq = int(row["seq"])
    kind = str(row["type"])
    payload = unpack(kind, _json(row["payload"]))
    return EventRecord(
        session_id=session_id,
        seq=seq,
        turn_id=row["turn_id"],
        type=kind,
        payload=payload,
        created_at=float(row["created_at"]),
        last_seq=max(seq, int(row["last_seq"] or 0)),
        marks=decode_marks(seq, row["marks"]),
    )


def partial_text_record(row: Row) -> EventRecord:
    """A ``partial_text`` row (a flush of a step still streaming) as the log row it stands for."""
    seq = int(row["seq"])
    step, index = int(row["step"]), int(row["block_index"])
    return EventRecord(
        session_id=str(row["session_id"]),
        seq=seq,
        turn_id=str(row["turn_id"]),
        type="text_delta",
        payload=flushed_text_event(str(row["text"]), index, step),
        created_at=float(row["created_at"]),
        last_seq=max(seq, int(row["last_seq"] or 0)),
        marks=decode_marks(seq, row["marks"]),
    )


class _Decimals(dict[int, str]):
    """``str(n)``, kept for the small integers marks are made of (a delta's length, the step
    from one number to the next): formatting an int is most of the cost of encoding them."""

    def __missing__(self, n: int) -> str:
        return str(n)


_DECIMAL = _Decimals((n, str(n)) for n in range(512))


def encode_marks(seq: int, marks: Sequence[tuple[int, int]] | None) -> str | None:
    """Marks as a compact JSON list of differences (a 10-byte delta costs ~5 bytes): each
    mark's number less the previous one's (the first: less ``seq``), then its end less the
    previous end (the first: less 0). (A row holds a mark per delta: the differences are taken
    and formatted by C loops, not a Python step per mark.)"""
    if marks is None:
        return None
    if not marks:
        return "[]"
    seqs, ends = zip(*marks, strict=True)
    flat = [0] * (2 * len(seqs))
    flat[0::2] = map(sub, seqs, (seq, *seqs))
    flat[1::2] = map(sub, ends, (0, *ends))
    return f"[{','.join(map(_DECIMAL.__getitem__, flat))}]"  # the compact JSON of the list


def decode_marks(seq: int, raw: Any) -> tuple[tuple[int, int], ...] | None:
    """The marks :func:`encode_marks` wrote for a row numbered ``seq`` (a last odd value, which
    it never writes, is ignored)."""
    if raw is None:
        return None
    flat = _json(raw)
    n = len(flat) - len(flat) % 2
    # Running sums from (seq, 0), each without its first value (the start itself).
    seqs = islice(accumulate(map(int, flat[0:n:2]), initial=seq), 1, None)
    ends = islice(accumulate(map(int, flat[1:n:2]), initial=0), 1, None)
    return tuple(zip(seqs, ends, strict=True))
