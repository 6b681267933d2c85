"""A tool call's input reads back with its keys in the order the model wrote them, from the
messages and from the call's row, on both backends.

The input is sent to the model again with every later request of the session, and a request's
bytes are the API's prompt-cache key; the snapshot and ``drover show`` give it to clients.
PostgreSQL's ``jsonb`` keeps an object's keys in its own order (shortest first), so these
columns are text there as in SQLite.
"""

from __future__ import annotations

from typing import Any

from support.writes import append_message, replace_message, upsert_tool_call

from drover.core.messages import TextBlock, ToolUseBlock, assistant_message, user_message

#: Keys no sorting keeps in this order (longest first, then a nested object the same way).
INPUT = {
    "timeout_seconds": 30,
    "path": "a.txt",
    "zz": {"content": "x", "b": [1, {"yy": 0, "a": 1}]},
}


def _order(value: Any) -> Any:
    """``value``'s keys, in order, at every depth."""
    if isinstance(value, dict):
        return [(k, _order(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_order(v) for v in value]
    return value


async def test_a_tool_input_keeps_its_key_order(store: Any) -> None:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), "h:1:1", 30)
    call = ToolUseBlock(id="c1", name="edit", input=INPUT)
    seq = await append_message(store, turn.id, assistant_message([call]))
    await upsert_tool_call(
        store, turn.id, "c1", call_index=0, name="edit", state="input-available", input=INPUT
    )
    second = ToolUseBlock(id="c2", name="edit", input=dict(reversed(INPUT.items())))
    await append_message(store, turn.id, assistant_message([TextBlock(text="and")]))
    await replace_message(store, turn.id, None, assistant_message([second]))

    first, replaced = await store.turn_messages(turn.id)
    assert first.seq == seq
    (block,) = first.message.tool_uses
    assert _order(block.input) == _order(INPUT)
    (block,) = replaced.message.tool_uses
    assert _order(block.input) == _order(second.input)
    (row,) = await store.tool_calls(turn.id)
    assert row.input is not None and _order(row.input) == _order(INPUT)
