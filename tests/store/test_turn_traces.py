"""Where each turn's span is (``turn_traces``), on every backend: kept, replaced, read back by
another store on the same journal, and deleted with its session."""

from __future__ import annotations

import support.writes as writes

from drover.journal.protocol import Store
from drover.store.sql.turn_traces import TurnTraces

TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_a_turns_trace_is_kept_replaced_and_deleted_with_its_session(
    store: Store, owner: str
) -> None:
    assert isinstance(store, TurnTraces)
    session = await store.create_session(workdir="/w", model="anthropic:test")
    turn = await store.begin_turn(session.id, None, owner, 30.0)
    assert await store.turn_trace(turn.id) is None
    await store.record_turn_trace(turn.id, TRACE)
    assert await store.turn_trace(turn.id) == TRACE
    other = TRACE.replace("00f067aa0ba902b7", "1111111111111111")
    await store.record_turn_trace(turn.id, other)
    assert await store.turn_trace(turn.id) == other
    await writes.end_turn(store, turn.id, "completed", owner=owner)
    assert await store.delete_session(session.id)
    assert await store.turn_trace(turn.id) is None
