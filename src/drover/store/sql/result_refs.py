"""A tool's output stored once: a results message may leave it in its call's row.

A call's output is kept in its ``tool_calls`` row, which no write changes once the call is in a
terminal state and which is deleted only with its turn (a fork copies it with the turn). So a
results message stores a result whose content is exactly its call's output without the content,
marked :data:`OUTPUT_IN_CALL`, and reading the message puts the row's output back. A short
output (under :data:`SHORTEST_REFERRED` characters) stays in the message as well.

The store checks this as it writes the message, in the same transaction: only a result whose
call has ended in the message's own turn with exactly that output refers to it. A result built
some other way (a late result for another turn's call, an edited one, a call row not yet
written) keeps its content, so a reference never says anything the row does not hold.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from drover.core.events import TERMINAL_TOOL_STATES
from drover.core.messages import Message, message_to_dict
from drover.store.sql.dialect import Dialect
from drover.store.sql.keys import TURN_NUM
from drover.store.sql.plan import Plan, rows

#: The mark of a stored ``tool_result`` block whose content is its call's row's output.
OUTPUT_IN_CALL = "output_in_call"

#: The shortest content worth a reference: a shorter one costs fewer bytes stored twice than
#: the read that checks its reference as the message is written, and the read that resolves it.
SHORTEST_REFERRED = 256

#: Each call's output in a turn, by call id.
Outputs = Mapping[str, str | None]


def stored_body(
    d: Dialect, turn_id: str, message: Message, num: int | None = None
) -> Plan[dict[str, Any]]:
    """``message`` as the ``messages`` row stores it: each result whose content its ended
    call's row holds already, as a reference to it (``num``: the turn's number, when the
    caller has it)."""
    body = message_to_dict(message)
    wanted = {b.tool_use_id for b in message.tool_results if len(b.content) >= SHORTEST_REFERRED}
    if not wanted:
        return body
    ended = sorted(TERMINAL_TOOL_STATES)
    turn = TURN_NUM if num is None else "?"
    found = yield from rows(
        f"SELECT call_id, output FROM tool_calls WHERE turn_num = {turn} "
        f"AND call_id IN ({_marks(wanted)}) AND state IN ({_marks(ended)}) "
        "AND output IS NOT NULL",
        turn_id if num is None else num,
        *sorted(wanted),
        *ended,
    )
    held = {str(r["call_id"]): str(r["output"]) for r in found}
    if not held:
        return body
    content = []
    for block in body["content"]:
        output = held.get(block.get("tool_use_id", "")) if block["type"] == "tool_result" else None
        if output is not None and d.text(block["content"]) == output:
            block = {k: v for k, v in block.items() if k != "content"}
            block[OUTPUT_IN_CALL] = True
        content.append(block)
    body["content"] = content
    return body


def _marks(values: Collection[str]) -> str:
    return ", ".join("?" for _ in values)


def refers(body: Mapping[str, Any]) -> bool:
    """Whether a stored body leaves an output in its call's row."""
    return any(OUTPUT_IN_CALL in block for block in body.get("content", ()))


def with_outputs(body: Mapping[str, Any], outputs: Outputs) -> dict[str, Any]:
    """A stored body with each output it left in a call's row put back (a row that is gone,
    which only a hand-edited database can show, gives an empty content)."""
    content = []
    for block in body.get("content", ()):
        if OUTPUT_IN_CALL in block:
            block = {k: v for k, v in block.items() if k != OUTPUT_IN_CALL}
            block["content"] = outputs.get(str(block.get("tool_use_id"))) or ""
        content.append(block)
    return {**body, "content": content}


def turn_outputs(turn_id: str) -> Plan[dict[str, str | None]]:
    """The outputs of one turn's calls, by call id."""
    found = yield from rows(
        f"SELECT call_id, output FROM tool_calls WHERE turn_num = {TURN_NUM}", turn_id
    )
    return {str(r["call_id"]): r["output"] for r in found}


def session_outputs(session_id: str) -> Plan[dict[str, dict[str, str | None]]]:
    """The outputs of a whole session's calls, by turn and call id (one read for a resume)."""
    found = yield from rows(
        "SELECT t.id AS turn_id, tc.call_id, tc.output FROM tool_calls tc "
        "JOIN turns t ON t.num = tc.turn_num WHERE t.session_id = ?",
        session_id,
    )
    out: dict[str, dict[str, str | None]] = {}
    for r in found:
        out.setdefault(str(r["turn_id"]), {})[str(r["call_id"])] = r["output"]
    return out


#: Reads the outputs of a turn's calls when a body refers to them (``turn_id`` → outputs).
OutputsOf = Callable[[str], Plan[Outputs]]


class SessionOutputs:
    """Outputs read once for a whole session, the first time a turn's body needs them."""

    def __init__(self, session_id: str) -> None:
        self._session_id = session_id
        self._read: dict[str, dict[str, str | None]] | None = None

    def __call__(self, turn_id: str) -> Plan[Outputs]:
        if self._read is None:
            self._read = yield from session_outputs(self._session_id)
        return self._read.get(turn_id, {})
