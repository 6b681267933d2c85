"""The SQL event log: numbering a session's events, logging rows, reading them back.

A session's log numbers its events 1, 2, 3… without gaps; a coalesced text row covers the
numbers of the live deltas it holds. A number the journal handed out is kept; a row the store
logs on its own (settling, recovery) is numbered after every number used *or reserved*, so it
never takes a number a client may already hold (see :mod:`drover.journal.numbering`). While a
step streams, its text rows are the log's tail in ``partial_text`` (:mod:`drover.store.sql.text`);
a read merges them in number order.
"""

from __future__ import annotations

import functools
import heapq
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from drover.core.messages import Message, Usage, message_from_dict, message_to_dict
from drover.errors import StoreError
from drover.journal.fold import TEXT_AT, resolved
from drover.journal.records import EventRecord
from drover.journal.writes import MESSAGE_OF, OUTPUT_OF, TEXT_OF, AppendEvent, with_output
from drover.store.sql.common import Held, first_value, need_session, turn_num, turn_session
from drover.store.sql.dialect import Dialect
from drover.store.sql.keys import SESSION_NUM, TURN_NUM
from drover.store.sql.log_shapes import pack, unpack
from drover.store.sql.plan import Exec, Plan, execute, rows
from drover.store.sql.result_refs import Outputs, refers, turn_outputs, with_outputs
from drover.store.sql.rows import event_from_row, json_value, partial_text_record

#: A row's turn: its number, or (a worker's own turn, which has no row) its id as text (three
#: parameters, the turn's id each time).
_TURN = f"{TURN_NUM}, NULLIF(?::text, (SELECT id FROM turns WHERE id = ?::text))"
#: The columns of a log row (``e``) as :func:`~drover.store.sql.rows.event_from_row` reads them.
EVENT_COLUMNS = (
    "e.seq, e.part, e.last_seq, COALESCE(e.turn_text, "
    "(SELECT t.id FROM turns t WHERE t.num = e.turn_num)) AS turn_id, "
    "e.type, e.payload, e.marks, e.created_at"
)

#: A log row whose session and turn are named by id (their numbers looked up as it is
#: inserted), or by number (a :class:`Held` of the transaction has them).
_BY_ID = f"({SESSION_NUM}, {_TURN}, ?, ?, ?, ?, ?, ?, ?)"
_BY_NUMBER = "(?, ?, NULL, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_EVENTS = (
    "INSERT INTO events (session_num, turn_num, turn_text, seq, part, type, payload, "
    "created_at, last_seq, marks) VALUES "
)
#: The most log rows one statement inserts: up to eleven parameters each, under the 999 of an
#: old SQLite.
ROWS_PER_INSERT = 90

#: How a row names its session and turn: ``(session's id, turn's id × 3)`` for :data:`_BY_ID`,
#: ``(session's number, turn's number)`` for :data:`_BY_NUMBER`.
Keys = tuple[Any, ...]


@functools.cache
def _insert_events(n: int, by_number: bool) -> str:
    """The statement that logs ``n`` rows."""
    return _INSERT_EVENTS + ", ".join([_BY_NUMBER if by_number else _BY_ID] * n)


def _keys(session_id: str, turn_id: str | None, held: Held | None) -> tuple[Keys, bool]:
    """How a row of ``session_id`` and ``turn_id`` names them, and whether by number: by
    number when ``held`` checked both (a turn it did not check may be a worker's own, which
    has no number)."""
    if held is not None:
        session = held.session_nums.get(session_id)
        turn = None if turn_id is None else turn_num(held, turn_id)
        if session is not None and (turn is not None or turn_id is None):
            return (session, turn), True
    return (session_id, turn_id, turn_id, turn_id), False


#: How many parameters :func:`last_seq_sql` takes (each the session's id).
LAST_SEQ_PARAMS = 3


def last_seq_sql(d: Dialect) -> str:
    """The greatest number the session's log holds, its streaming tail included
    (:data:`LAST_SEQ_PARAMS` parameters: the session's id each time). A row covers numbers past
    its own only when it holds coalesced text (``last_seq > seq``): only those are indexed by
    ``last_seq``; the others' greatest number is their greatest ``seq``."""
    return (
        f"{d.greatest}(COALESCE((SELECT MAX(seq) FROM events WHERE session_num = {SESSION_NUM}), "
        f"0), COALESCE((SELECT MAX(last_seq) FROM events WHERE session_num = {SESSION_NUM} "
        "AND last_seq > seq), 0), "
        "COALESCE((SELECT MAX(last_seq) FROM partial_text WHERE session_id = ?), 0))"
    )


def next_event_seq(d: Dialect, session_id: str) -> Plan[int]:
    """The first number after every one used or reserved in the session's log."""
    found = yield from rows(
        f"SELECT {d.greatest}({last_seq_sql(d)}, COALESCE((SELECT "
        "seq_reserved FROM sessions WHERE id = ?), 0)) + 1 AS n",
        *[session_id] * (LAST_SEQ_PARAMS + 1),
    )
    return int(first_value(found, "n"))


def last_event_seq(d: Dialect, session_id: str) -> Plan[int]:
    found = yield from rows(f"SELECT {last_seq_sql(d)} AS seq", *[session_id] * LAST_SEQ_PARAMS)
    return int(first_value(found, "seq"))


def log_bounds(d: Dialect, session_id: str) -> Plan[tuple[int, int]]:
    """:func:`last_event_seq` and :func:`next_event_seq`, read together."""
    found = yield from rows(
        f"SELECT b.last AS last, {d.greatest}(b.last, COALESCE((SELECT "
        "seq_reserved FROM sessions WHERE id = ?), 0)) + 1 AS n "
        f"FROM (SELECT {last_seq_sql(d)} AS last) b",
        *[session_id] * (LAST_SEQ_PARAMS + 1),
    )
    return int(first_value(found, "last")), int(first_value(found, "n"))


def reserve_seqs(
    d: Dialect, session_id: str, upto: int, turn_id: str | None, owner: str | None
) -> Plan[None]:
    """Grow the session's reservation to ``upto`` (with ``turn_id``, only while that turn runs
    under ``owner``)."""
    if turn_id is None:
        yield from need_session(d, session_id)
    elif (yield from turn_session(d, turn_id, owner)) != session_id:
        raise StoreError(f"turn {turn_id} is not a turn of session {session_id}")
    yield from execute(
        f"UPDATE sessions SET seq_reserved = {d.greatest}(seq_reserved, ?) WHERE id = ?",
        upto,
        session_id,
    )


# -- the log's writes -----------------------------------------------------------------------


def log(
    d: Dialect,
    session_id: str,
    turn_id: str | None,
    event: Mapping[str, Any],
    now: float,
    seq: int | None = None,
    last_seq: int | None = None,
    marks: str | None = None,
    part: int = 0,
    held: Held | None = None,
) -> Plan[int]:
    """Log one row; numbered after every number used or reserved unless ``seq`` is given."""
    if seq is None:
        seq = yield from next_event_seq(d, session_id)
    keys, by_number = _keys(session_id, turn_id, held)
    # Yielded as is (not through ``execute``): the store makes one for every log row.
    yield Exec(_insert_events(1, by_number), _row(d, keys, event, now, seq, last_seq, marks, part))
    return seq


def _row(
    d: Dialect,
    keys: Keys,
    event: Mapping[str, Any],
    now: float,
    seq: int,
    last_seq: int | None,
    marks: str | None,
    part: int,
) -> tuple[Any, ...]:
    """The parameters of a log row numbered ``seq``."""
    body = event if type(event) is dict else dict(event)
    end = seq if last_seq is None or last_seq < seq else last_seq
    kind = str(event["type"])
    # A payload of a known shape as its values (:mod:`~drover.store.sql.log_shapes`), any other
    # without its type, which the row's ``type`` column holds: a read puts both back.
    packed = pack(kind, body)
    if packed is not None:
        return (*keys, seq, part, kind, d.json_text(packed), now, end, marks)
    payload = d.json_text(body)
    head = _type_head(kind)
    if payload.startswith(head):
        payload = "{" + payload[len(head) :]
    return (*keys, seq, part, kind, payload, now, end, marks)


@functools.cache
def _type_head(kind: str) -> str:
    """How an event's JSON of type ``kind`` begins when its type is its first key and not its
    only one."""
    return '{"type":' + json.dumps(kind, ensure_ascii=False) + ","


def log_text(
    d: Dialect,
    session_id: str,
    turn_id: str,
    event: Mapping[str, Any],
    now: float,
    first: int | None,
    last_seq: int | None,
    marks: str | None,
    held: Held | None = None,
) -> Plan[int]:
    """A coalesced text row; one that starts inside a delta an earlier row began shares that
    row's first number and takes the next ``part``."""
    part = 0
    if first is not None:
        found = yield from rows(
            f"SELECT COUNT(*) AS n FROM events WHERE session_num = {SESSION_NUM} AND seq = ?",
            session_id,
            first,
        )
        part = int(first_value(found, "n"))
    return (yield from log(d, session_id, turn_id, event, now, first, last_seq, marks, part, held))


def append_event(d: Dialect, w: AppendEvent, now: float, held: Held | None = None) -> Plan[int]:
    if "type" not in w.event:
        raise ValueError("an event needs a type")
    yield from need_session(d, w.session_id, held)
    return (yield from log(d, w.session_id, w.turn_id, w.event, now, w.seq, w.last_seq, held=held))


def append_numbered(
    d: Dialect, writes: Sequence[AppendEvent], now: float, held: Held | None = None
) -> Plan[list[int]]:
    """Log rows the journal numbered (each ``seq`` given) as :func:`append_event` does one by
    one, in one statement for up to :data:`ROWS_PER_INSERT` of them; their numbers."""
    seqs: list[int] = []
    for w in writes:
        if "type" not in w.event:
            raise ValueError("an event needs a type")
        if w.seq is None:
            raise ValueError("rows logged together are numbered")
        yield from need_session(d, w.session_id, held)
        seqs.append(w.seq)
    for start in range(0, len(writes), ROWS_PER_INSERT):
        chunk = writes[start : start + ROWS_PER_INSERT]
        named = [_keys(w.session_id, w.turn_id, held) for w in chunk]
        by_number = all(known for _, known in named)
        params: list[Any] = []
        for w, seq, (keys, known) in zip(
            chunk, seqs[start : start + ROWS_PER_INSERT], named, strict=True
        ):
            if known and not by_number:  # one statement, one shape: every row by id
                keys = (w.session_id, w.turn_id, w.turn_id, w.turn_id)
            params += _row(d, keys, w.event, now, seq, w.last_seq, None, 0)
        yield Exec(_insert_events(len(chunk), by_number), tuple(params))
    return seqs


# -- reading the log ------------------------------------------------------------------------


def events_after(
    d: Dialect, session_id: str, after_seq: int, limit: int | None
) -> Plan[list[EventRecord]]:
    """The rows that cover any number above ``after_seq``, in ``seq`` order; run it in a
    snapshot (a step's rows moving into ``events`` in between would otherwise show twice or not
    at all)."""
    most = d.no_limit if limit is None else limit
    found = yield from rows(
        # A row covers a number above ``after_seq`` when its own is (found through the key),
        # or when it holds coalesced text reaching past it (the rows indexed by ``last_seq``;
        # ``+seq`` keeps the planner on that index).
        f"SELECT {EVENT_COLUMNS} FROM events e WHERE e.session_num = {SESSION_NUM} "
        f"AND e.seq > ? UNION ALL SELECT {EVENT_COLUMNS} FROM events e WHERE e.session_num = "
        f"{SESSION_NUM} AND e.last_seq > ? AND e.last_seq > e.seq AND +e.seq <= ? "
        "ORDER BY seq, part LIMIT ?",
        session_id,
        after_seq,
        session_id,
        after_seq,
        after_seq,
        most,
    )
    tail = yield from rows(
        "SELECT * FROM partial_text WHERE session_id = ? AND last_seq > ? ORDER BY id LIMIT ?",
        session_id,
        after_seq,
        most,
    )
    records = [event_from_row(session_id, r) for r in found]
    if tail:  # a step still streams: its rows go in number order among the others
        streaming = [partial_text_record(r) for r in tail]
        records = list(heapq.merge(records, streaming, key=lambda r: r.seq))
        del records[len(records) if limit is None else limit :]
    return (yield from _resolved(records))


def _resolved(records: list[EventRecord]) -> Plan[list[EventRecord]]:
    """Rows stored with a reference to a message or a tool call of their turn, as the log
    always showed them: ``text_of`` (a terminal event's answer), ``message_of`` (the message an
    ``assistant_message``/``tool_results`` event carries), ``text_at`` (a folded text row's
    text), ``output_of`` (a call's end: the output its call's row holds). One read of the
    messages, and one of the calls' outputs, per turn referred to."""
    bodies: dict[str, dict[int, Message]] = {}
    outputs: dict[str, Outputs] = {}

    def outputs_of(turn_id: str) -> Plan[Outputs]:
        if turn_id not in outputs:
            outputs[turn_id] = yield from turn_outputs(turn_id)
        return outputs[turn_id]

    out: list[EventRecord] = []
    for record in records:
        payload = record.payload
        turn_id = record.turn_id
        if turn_id is None or not (
            TEXT_OF in payload
            or MESSAGE_OF in payload
            or TEXT_AT in payload
            or OUTPUT_OF in payload
        ):
            out.append(record)
            continue
        if OUTPUT_OF in payload:
            held = yield from outputs_of(turn_id)
            new = with_output(payload, held.get(str(payload[OUTPUT_OF])))
            out.append(replace(record, payload=new))
            continue
        if turn_id not in bodies:
            found = yield from rows(
                f"SELECT seq, body FROM messages WHERE turn_num = {TURN_NUM}", turn_id
            )
            bodies[turn_id] = {}
            for r in found:
                body = json_value(r["body"])
                if refers(body):
                    body = with_outputs(body, (yield from outputs_of(turn_id)))
                bodies[turn_id][int(r["seq"])] = message_from_dict(body)
        messages = bodies[turn_id]
        if TEXT_AT in payload:
            ref = payload[TEXT_AT]
            new = resolved(payload, messages.get(int(ref[0])))
        else:
            key = TEXT_OF if TEXT_OF in payload else MESSAGE_OF
            message = messages.get(int(payload[key]))
            value: Any
            if key == TEXT_OF:
                name, value = "text", "" if message is None else message.text
            else:
                name, value = "message", None if message is None else message_to_dict(message)
            new = {
                (name if k == key else k): (value if k == key else v) for k, v in payload.items()
            }
        out.append(replace(record, payload=new))
    return out


def running_usage(d: Dialect, session_id: str, turn_id: str) -> Plan[Usage | None]:
    """A running turn's use so far, as its last ``usage`` event says. Newest first, stopping at
    the turn's usage row or at the first row of another turn (its rows are the log's tail):
    never more than the turn's own rows are read."""
    found = yield from rows(
        "SELECT type, turn_num, payload, (SELECT num FROM turns WHERE id = ?) AS own "
        f"FROM events WHERE session_num = {SESSION_NUM} "
        f"AND (type = 'usage' OR NOT (turn_num {d.same} {TURN_NUM})) "
        "ORDER BY seq DESC, part DESC LIMIT 1",
        turn_id,
        session_id,
        turn_id,
    )
    row = found[0] if found else None
    if row is None or row["type"] != "usage" or row["turn_num"] != row["own"]:
        return None
    payload = unpack("usage", json_value(row["payload"]))
    return Usage(
        input_tokens=int(payload.get("total_input", 0)),
        output_tokens=int(payload.get("total_output", 0)),
        partial=True,
    )
