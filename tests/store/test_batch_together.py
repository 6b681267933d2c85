"""Writes a batch makes together: a call's states written more than once in one batch (its row
written once), log rows the journal numbered one after the other (one statement); the store
ends as the writes one by one would leave it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from drover.core.messages import user_message
from drover.errors import LeaseLostError
from drover.journal.protocol import Store
from drover.journal.records import ToolCallRecord
from drover.journal.writes import AppendEvent, EndTurn, JournalWrite, UpsertToolCall
from drover.store.sql.log import ROWS_PER_INSERT

OWNER = "test-host:1:1"

# Writes of one call that differ in what the row keeps of an earlier write.
_VARIANTS: list[dict[str, Any]] = [
    {"state": "input-streaming", "step": 0},
    {"state": "input-streaming", "step": 2},
    {"state": "input-available", "input": {"n": 1}, "step": 2},
    {"state": "awaiting-permission", "read_only": True},
    {"state": "running", "input": {"n": 2}},
    {"state": "running", "step": 3, "read_only": False},
    {"state": "output-available", "output": "pong", "step": 2},
    {"state": "output-error", "output": "failed", "is_error": True},
    {"state": "interrupted", "outcome_unknown": True},
]
# What the row holds before the batch: nothing, a state that can change, or a final one.
_BEFORE: list[dict[str, Any] | None] = [
    None,
    {"state": "input-available", "input": {"n": 0}, "step": 1, "read_only": True},
    {"state": "output-available", "output": "earlier", "step": 1},
]


def _call(turn_id: str, call_id: str, fields: dict[str, Any]) -> UpsertToolCall:
    return UpsertToolCall(turn_id=turn_id, call_id=call_id, call_index=0, name="ping", **fields)


def _row(record: ToolCallRecord) -> tuple[Any, ...]:
    return (
        record.call_id,
        record.step,
        record.call_index,
        record.name,
        record.state,
        record.input,
        record.output,
        record.is_error,
        record.outcome_unknown,
        record.read_only,
    )


async def _rows(store: Store, turn_id: str) -> list[tuple[Any, ...]]:
    return sorted(_row(r) for r in await store.tool_calls(turn_id))


async def test_a_call_written_twice_in_a_batch_ends_as_written_one_by_one(store: Store) -> None:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), OWNER, 30)
    cases = [
        *(
            (before, [first, then])
            for before in _BEFORE
            for first, then in itertools.product(_VARIANTS, repeat=2)
        ),
        (None, [_VARIANTS[0], _VARIANTS[2], _VARIANTS[4], _VARIANTS[6]]),
        (_BEFORE[1], [_VARIANTS[1], _VARIANTS[3], _VARIANTS[5]]),
        (None, [_VARIANTS[2], _VARIANTS[6], _VARIANTS[4]]),
    ]
    seq = 0
    for k, (before, states) in enumerate(cases):
        one, together = f"one-{k}", f"all-{k}"
        if before is not None:
            await store.write_batch([_call(turn.id, one, before), _call(turn.id, together, before)])
        for fields in states:
            await store.write_batch([_call(turn.id, one, fields)])
        batch: list[JournalWrite] = []
        for fields in states:
            seq += 1
            batch += [
                _call(turn.id, together, fields),
                AppendEvent(session.id, turn.id, {"type": "tool_state"}, seq=seq),
            ]
        results = await store.write_batch(batch)
        assert results[0::2] == [None] * len(states)
        assert results[1::2] == list(range(seq - len(states) + 1, seq + 1))
    rows = await _rows(store, turn.id)
    alone = [r[1:] for r in rows if r[0].startswith("one-")]
    batched = [r[1:] for r in rows if r[0].startswith("all-")]
    assert len(alone) == len(cases) and batched == alone
    assert len(await store.events_after(session.id)) == seq


async def test_a_call_written_again_after_the_end_of_its_turn_is_refused(store: Store) -> None:
    # Its two states are not made as one: the end of the turn between them reads the table.
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), OWNER, 30)
    with pytest.raises(LeaseLostError):
        await store.write_batch(
            [
                _call(turn.id, "c1", {"state": "running", "step": 1}),
                EndTurn(turn_id=turn.id, status="completed", owner=OWNER),
                _call(turn.id, "c1", {"state": "output-available", "output": "pong"}),
            ]
        )
    assert (await store.turns(session.id))[0].status == "running"
    assert await store.tool_calls(turn.id) == []


async def test_numbered_log_rows_in_a_row_are_logged_as_one_by_one(store: Store) -> None:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), OWNER, 30)
    many = ROWS_PER_INSERT + 3  # more than one statement holds

    def row(seq: int, **extra: Any) -> AppendEvent:
        event = {"type": "usage", "n": seq, "text": "é ok", **extra}
        return AppendEvent(session.id, turn.id, event, seq=seq, last_seq=extra.get("last"))

    batch: list[JournalWrite] = [
        row(1),
        row(2, last=4),
        _call(turn.id, "c1", {"state": "running"}),
        row(5),
        *(row(seq) for seq in range(6, 6 + many)),
        AppendEvent(session.id, None, {"type": "note"}, seq=6 + many),
    ]
    results = await store.write_batch(batch)
    assert results == [1, 2, None, *range(5, 7 + many)]
    logged = await store.events_after(session.id)
    assert [(r.seq, r.last_seq, r.turn_id) for r in logged] == [
        (1, 1, turn.id),
        (2, 4, turn.id),
        *((seq, seq, turn.id) for seq in range(5, 6 + many)),
        (6 + many, 6 + many, None),
    ]
    assert logged[1].payload == {"type": "usage", "n": 2, "text": "é ok", "last": 4}


async def test_a_batch_with_a_taken_number_among_its_rows_makes_none_of_them(
    store: Store,
) -> None:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), OWNER, 30)
    await store.write_batch([AppendEvent(session.id, turn.id, {"type": "usage"}, seq=2)])
    with pytest.raises(Exception):  # noqa: B017, PT011 (each backend's integrity error)
        await store.write_batch(
            [AppendEvent(session.id, turn.id, {"type": "usage"}, seq=n) for n in (1, 2, 3)]
        )
    assert [r.seq for r in await store.events_after(session.id)] == [2]


async def test_a_row_covering_numbers_past_its_own_bounds_the_log_and_its_reads(
    store: Store,
) -> None:
    """A row of coalesced text covers the numbers of the deltas it holds (``seq`` to
    ``last_seq``): as the log's last row it gives the log's last number, and a read after any
    number it covers starts with it; a read after its last number does not."""
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), OWNER, 30)
    text = {"type": "text_delta", "text": "Hello, world"}
    await store.write_batch(
        [
            AppendEvent(session.id, turn.id, {"type": "step_started", "step": 1}, seq=1),
            AppendEvent(session.id, turn.id, text, seq=2, last_seq=7),
        ]
    )
    assert await store.last_event_seq(session.id) == 7
    assert await store.log_bounds(session.id) == (7, 8)
    assert await store.next_event_seq(session.id) == 8
    for after in range(9):
        got = [(r.seq, r.last_seq) for r in await store.events_after(session.id, after)]
        expected = [(1, 1), (2, 7)] if after == 0 else [(2, 7)] if after < 7 else []
        assert got == expected, after
    await store.write_batch([AppendEvent(session.id, turn.id, {"type": "note"}, seq=8)])
    got = [(r.seq, r.last_seq) for r in await store.events_after(session.id, 5, limit=1)]
    assert got == [(2, 7)]
