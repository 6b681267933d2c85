"""Group commit: ``write_batch`` makes the journal's writes in order, in one transaction, on
every backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from drover.core.messages import TextBlock, ToolUseBlock, assistant_message, user_message
from drover.errors import LeaseLostError
from drover.journal.protocol import Store
from drover.journal.writes import (
    TEXT_OF,
    AppendEvent,
    AppendMessage,
    AppendPartialText,
    EndTurn,
    UpsertToolCall,
)
from drover.store.sqlite.store import SqliteStore

from .helpers import traced

OWNER = "test-host:1:1"


async def test_a_batch_makes_its_writes_in_order_and_returns_their_results(store: Store) -> None:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), OWNER, 30)
    use = ToolUseBlock(id="c1", name="bash", input={"command": "ls"})
    message = assistant_message([TextBlock(text="Looking."), use])
    results = await store.write_batch(
        [
            AppendPartialText(turn.id, 1, 0, "Looking.", seq=1, last_seq=1),
            AppendEvent(session.id, turn.id, {"type": "step_started", "step": 1}, seq=2),
            UpsertToolCall(
                turn_id=turn.id, call_id="c1", call_index=0, name="bash", state="running", step=1
            ),
            # The message drops the step's text deltas, in the same transaction.
            AppendMessage(turn.id, message, step=1),
            AppendEvent(session.id, turn.id, {"type": "assistant_message"}, seq=3),
        ]
    )
    assert results == [1, 2, None, 1, 3]
    assert [e.type for e in await store.events_after(session.id)] == [
        "text_delta",
        "step_started",
        "assistant_message",
    ]
    (call,) = await store.tool_calls(turn.id)
    assert call.state == "running"
    (stored,) = await store.turn_messages(turn.id)  # no partial message left from the deltas
    assert stored.message == message and not stored.partial
    ended = await store.write_batch(
        [EndTurn(turn_id=turn.id, status="completed", owner=OWNER, event={"type": "done"})]
    )
    assert [[e.type for e in logged] for logged in ended] == [["tool_state", "done"]]


async def test_a_batch_is_all_or_nothing(store: Store) -> None:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), OWNER, 30)
    with pytest.raises(LeaseLostError):
        await store.write_batch(
            [
                AppendEvent(session.id, turn.id, {"type": "step_started", "step": 1}, seq=1),
                AppendMessage(turn.id, assistant_message([TextBlock(text="lost")])),
                # Another process holds the turn: the whole batch is refused.
                EndTurn(turn_id=turn.id, status="completed", owner="other:2:2"),
            ]
        )
    assert await store.events_after(session.id) == []
    assert await store.turn_messages(turn.id) == []
    assert (await store.turns(session.id))[0].status == "running"


async def test_one_write_is_a_batch_of_one(store: Store) -> None:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), OWNER, 30)
    (seq,) = await store.write_batch([AppendEvent(session.id, turn.id, {"type": "step_started"})])
    assert [e.seq for e in await store.events_after(session.id)] == [seq]


async def test_a_terminal_event_that_refers_to_its_answer_reads_back_with_the_text(
    store: Store,
) -> None:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), OWNER, 30)
    answer = assistant_message([TextBlock(text="The answer "), TextBlock(text="is 42.")])
    seq, _ = await store.write_batch(
        [
            AppendMessage(turn.id, answer, step=1),
            EndTurn(
                turn_id=turn.id,
                status="completed",
                owner=OWNER,
                event={"type": "done", TEXT_OF: 1, "usage": {"output_tokens": 3}},
            ),
        ]
    )
    assert seq == 1
    (done,) = await store.events_after(session.id)
    assert dict(done.payload) == {
        "type": "done",
        "text": "The answer is 42.",
        "usage": {"output_tokens": 3},
    }


async def test_a_write_after_the_turn_ended_in_the_same_batch_is_refused(store: Store) -> None:
    # A batch checks each turn once; the end of the turn must undo that check.
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), OWNER, 30)
    call = {"turn_id": turn.id, "call_index": 0, "name": "bash", "step": 1}
    with pytest.raises(LeaseLostError):
        await store.write_batch(
            [
                UpsertToolCall(**call, call_id="c1", state="input-available"),
                EndTurn(turn_id=turn.id, status="completed", owner=OWNER),
                UpsertToolCall(**call, call_id="c2", state="running"),
            ]
        )
    assert (await store.turns(session.id))[0].status == "running"
    assert await store.tool_calls(turn.id) == []


async def test_a_batch_checks_its_turn_and_session_once(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "journal.db") as store:
        session = await store.create_session(workdir="/w", model="m")
        turn = await store.begin_turn(session.id, user_message("go"), OWNER, 30)
        call = {"turn_id": turn.id, "call_id": "c1", "call_index": 0, "name": "bash", "step": 1}
        async with traced(store) as statements:
            await store.write_batch(
                [
                    UpsertToolCall(**call, state="input-available"),
                    AppendEvent(session.id, turn.id, {"type": "usage"}, seq=1),
                    UpsertToolCall(**call, state="running"),
                    AppendEvent(session.id, turn.id, {"type": "tool_state"}, seq=2),
                ]
            )
    checks = [s for s in statements if "FROM turns t JOIN sessions" in s]
    locks = [s for s in statements if "FROM sessions s WHERE s.id" in s]
    assert (len(checks), len(locks)) == (1, 0)


async def test_a_tool_step_on_sqlite_makes_only_the_statements_it_needs(tmp_path: Path) -> None:
    # A step's three commits as the journal makes them. SQLite's write transaction holds the
    # whole file (no session lock), a message is numbered as it is inserted, the step's text
    # rows are read as they are deleted, a folded block that covers its numbers needs no look
    # at the log, and the free pages are counted only once enough rows were deleted.
    async with SqliteStore(tmp_path / "journal.db") as store:
        session = await store.create_session(workdir="/w", model="m")
        turn = await store.begin_turn(session.id, user_message("go"), OWNER, 30)

        def event(kind: str, seq: int) -> AppendEvent:
            return AppendEvent(session.id, turn.id, {"type": kind}, seq=seq)

        async def step(n: int) -> list[str]:
            first = 10 * n
            call = {"turn_id": turn.id, "call_id": f"c{n}", "call_index": 0, "name": "ping"}
            text = "Pinging."
            message = assistant_message(
                [TextBlock(text=text), ToolUseBlock(id=f"c{n}", name="ping", input={})]
            )
            said = {"type": "assistant_message", "message_of": None}
            batches = [
                [
                    event("step_started", first),
                    AppendPartialText(
                        turn.id,
                        n,
                        0,
                        text,
                        seq=first + 1,
                        last_seq=first + 2,
                        marks=[(first + 1, 3), (first + 2, len(text))],
                    ),
                    UpsertToolCall(**call, state="input-streaming", step=n),
                    event("tool_state", first + 3),
                ],
                [
                    UpsertToolCall(**call, state="running", input={}, step=n),
                    event("tool_state", first + 4),
                    AppendMessage(
                        turn.id,
                        message,
                        step=n,
                        fold_from=first + 1,
                        logged=AppendEvent(session.id, turn.id, said, seq=first + 5),
                    ),
                ],
                [
                    event("tool_start", first + 6),
                    UpsertToolCall(**call, state="output-available", output="pong", step=n),
                    AppendMessage(turn.id, user_message("pong")),
                    event("tool_results", first + 7),
                ],
            ]
            async with traced(store) as statements:
                for batch in batches:
                    await store.write_batch(batch)
            return [" ".join(s.split()[:3]) for s in statements]

        await step(1)  # the first step counts the free pages an earlier process may have left
        made = await step(2)
        logged = await store.events_after(session.id, 19)
    assert sorted(made) == sorted(
        ["BEGIN IMMEDIATE"] * 3
        + ["COMMIT"] * 3
        + ["SELECT s.id, s.num"] * 3  # the turn, checked once a commit
        + ["INSERT INTO events"] * 7  # 6 rows and the folded text row
        + ["INSERT INTO tool_calls"] * 3
        + ["INSERT INTO messages"] * 2
        + ["INSERT INTO partial_text", "DELETE FROM partial_text"]
    )
    assert [(r.seq, r.last_seq, r.type) for r in logged][:2] == [
        (20, 20, "step_started"),
        (21, 22, "text_delta"),
    ]
    assert logged[1].payload["text"] == "Pinging."
