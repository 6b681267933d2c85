"""The turn's work in the SQL journal: its messages and its tool calls, written and read back.

A running turn's messages are numbered in the turn; a finished step's message retires the
step's streamed text rows in the same write (:mod:`drover.store.sql.text`), and the log row
that carries it may refer to it instead of holding a copy. A tool call is one row holding its
latest state; a call in a terminal state keeps it. The log row of a call's end may refer to the
call's row for its output, and so may the step's results message
(:mod:`drover.store.sql.result_refs`): the output is then stored once.
"""

from __future__ import annotations

from drover.errors import StoreError
from drover.journal.records import StoredMessage, ToolCallRecord
from drover.journal.rules import partial_messages
from drover.journal.writes import (
    MESSAGE_OF,
    OUTPUT_OF,
    AppendMessage,
    ReplaceMessage,
    UpsertToolCall,
    with_output,
)
from drover.store.sql.common import TERMINAL_SQL, Held, add_message, turn_num, turn_session
from drover.store.sql.dialect import Dialect
from drover.store.sql.keys import TURN_NUM
from drover.store.sql.log import log
from drover.store.sql.plan import Exec, Plan, execute, rows
from drover.store.sql.result_refs import (
    Outputs,
    OutputsOf,
    refers,
    stored_body,
    turn_outputs,
    with_outputs,
)
from drover.store.sql.rows import CALL_COLUMNS, json_value, stored_message, tool_call_from_row
from drover.store.sql.text import FreedSpace, deltas, retire


def _upsert_call(turn: str) -> str:
    """The upsert of a call whose turn is ``turn`` (its number, or its lookup by id). A call in
    a terminal state keeps it: a late write cannot reopen it."""
    return (
        "INSERT INTO tool_calls (turn_num, call_id, step, call_index, name, state, input, "
        "output, is_error, outcome_unknown, read_only, created_at, updated_at) "
        f"VALUES ({turn}, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (turn_num, call_id) DO UPDATE SET "
        "step = CASE WHEN excluded.step > 0 THEN excluded.step ELSE tool_calls.step END, "
        "call_index = excluded.call_index, name = excluded.name, state = excluded.state, "
        "input = COALESCE(excluded.input, tool_calls.input), "
        "output = COALESCE(excluded.output, tool_calls.output), "
        "is_error = excluded.is_error, outcome_unknown = excluded.outcome_unknown, "
        "read_only = excluded.read_only OR tool_calls.read_only, "
        f"updated_at = excluded.updated_at WHERE tool_calls.state NOT IN ({TERMINAL_SQL})"
    )


_UPSERT_BY_ID = _upsert_call(TURN_NUM)
_UPSERT_BY_NUMBER = _upsert_call("?")


def append_message(
    d: Dialect, space: FreedSpace, w: AppendMessage, now: float, held: Held | None = None
) -> Plan[int]:
    session_id = yield from turn_session(d, w.turn_id, held=held)
    seq = yield from add_message(d, w.turn_id, w.message, w.partial, now, held)
    if w.step is not None:
        fold = (w.message, seq) if w.fold_from is not None and not w.partial else None
        yield from retire(d, space, session_id, w.turn_id, w.step, now, fold, held)
    if w.logged is not None:
        row = w.logged
        event = {k: (seq if k == MESSAGE_OF else v) for k, v in row.event.items()}
        yield from log(d, row.session_id, row.turn_id, event, now, row.seq, row.last_seq, held=held)
    return seq


def replace_message(d: Dialect, w: ReplaceMessage, held: Held | None = None) -> Plan[None]:
    yield from turn_session(d, w.turn_id, held=held)
    body = d.json_text((yield from stored_body(d, w.turn_id, w.message)))
    if w.seq is None:  # the turn's latest message
        count = yield from execute(
            f"UPDATE messages SET body = ? WHERE turn_num = {TURN_NUM} "
            f"AND seq = (SELECT MAX(seq) FROM messages WHERE turn_num = {TURN_NUM})",
            body,
            w.turn_id,
            w.turn_id,
        )
    else:
        count = yield from execute(
            f"UPDATE messages SET body = ? WHERE turn_num = {TURN_NUM} AND seq = ?",
            body,
            w.turn_id,
            w.seq,
        )
    if count == 0:
        raise StoreError(f"no message {w.seq} in turn {w.turn_id}")


def upsert_call(d: Dialect, w: UpsertToolCall, now: float, held: Held | None = None) -> Plan[None]:
    input_json = None if w.input is None else d.json_text(dict(w.input))
    if held is None or (w.turn_id, None) not in held.turns:
        yield from turn_session(d, w.turn_id, held=held)
    num = turn_num(held, w.turn_id)
    count = yield Exec(  # as is (not through ``execute``): the store makes one for every state
        _UPSERT_BY_ID if num is None else _UPSERT_BY_NUMBER,
        (
            w.turn_id if num is None else num,
            *(w.call_id, w.step, w.call_index, w.name, w.state, input_json),
            *(d.clean(w.output), w.is_error, w.outcome_unknown, w.read_only, now, now),
        ),
    )
    if w.logged is not None:
        row = w.logged
        event = row.event
        if OUTPUT_OF in event and (not count or w.output is None):
            # The call had ended already and kept its output: the row carries this one.
            event = with_output(event, w.output)
        yield from log(d, row.session_id, row.turn_id, event, now, row.seq, row.last_seq, held=held)


def turn_messages(
    turn_id: str, now: float, outputs_of: OutputsOf = turn_outputs
) -> Plan[list[StoredMessage]]:
    """The turn's messages, then those rebuilt from its unfolded deltas (``now`` their time);
    run it in a snapshot (a fold committing in between cannot show twice). ``outputs_of``
    reads the outputs its results left in their calls' rows."""
    found = yield from rows(
        f"SELECT seq, body, partial, created_at FROM messages WHERE turn_num = {TURN_NUM} "
        "ORDER BY seq",
        turn_id,
    )
    left = yield from deltas(turn_id)
    out = []
    outputs: Outputs | None = None
    for r in found:
        body = json_value(r["body"])
        if refers(body):
            if outputs is None:
                outputs = yield from outputs_of(turn_id)
            body = with_outputs(body, outputs)
        out.append(stored_message(turn_id, r, body))
    first = out[-1].seq + 1 if out else 1
    for seq, message in enumerate(partial_messages(left), first):
        out.append(
            StoredMessage(turn_id=turn_id, seq=seq, message=message, partial=True, created_at=now)
        )
    return out


def tool_calls(turn_id: str | None, session_id: str | None) -> Plan[list[ToolCallRecord]]:
    """The calls of one turn, or (``turn_id`` None) of a whole session, in turn, step and call
    order."""
    column, key = ("t.id", turn_id) if turn_id is not None else ("t.session_id", session_id)
    found = yield from rows(
        f"SELECT t.id AS turn_id, {CALL_COLUMNS} FROM tool_calls tc "
        "JOIN turns t ON t.num = tc.turn_num "
        f"WHERE {column} = ? ORDER BY t.seq, tc.step, tc.call_index, tc.created_at",
        key,
    )
    return [tool_call_from_row(r) for r in found]
