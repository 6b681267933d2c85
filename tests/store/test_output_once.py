"""A tool call's output is stored once: the log row of the call's end and the step's results
message refer to the call's row, and every read puts the output back where it was."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

from support.writes import replace_message

from drover.core.events import (
    AssistantMessage,
    StepStarted,
    ToolResults,
    ToolStateChanged,
    TurnStarted,
)
from drover.core.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.journal.journal import Journal
from drover.journal.writes import OUTPUT_OF, AppendEvent, AppendMessage, EndTurn, UpsertToolCall
from drover.runtime.runner import load_history
from drover.store.sql.log_shapes import unpack
from drover.store.sql.result_refs import OUTPUT_IN_CALL, SHORTEST_REFERRED
from drover.store.sqlite.store import SqliteStore

OUTPUT = "page " * 400  # ~2 KB, as a fetched page


async def _tool_step(store: Any, published: dict[int, dict[str, Any]]) -> Journal:
    """One step of one call ending with :data:`OUTPUT`, through the journal."""
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("read"), "h:1:1", 30)
    journal = Journal(
        store,
        session.id,
        publish=lambda seq, _turn, payload, _prev: published.__setitem__(seq, payload),
    )
    await journal.send(TurnStarted(turn_id=turn.id, session_id=session.id, user_message=None))
    await journal.send(StepStarted(step=1))
    call = ToolUseBlock(id="c1", name="fetch", input={"n": 1})
    await journal.send(AssistantMessage(message=assistant_message([call])))
    base = {"call_id": "c1", "call_index": 0, "name": "fetch", "input": {"n": 1}}
    await journal.send(ToolStateChanged(**base, state="running"))
    await journal.send(ToolStateChanged(**base, state="output-available", output=OUTPUT))
    result = ToolResultBlock(tool_use_id="c1", content=OUTPUT)
    await journal.send(ToolResults(message=tool_result_message([result])))
    await journal.aclose()
    return journal


async def test_a_call_end_reads_back_as_it_was_published(store: Any) -> None:
    """Snapshot, replay, ``drover show`` and export all read the log through ``events_after``:
    the end's row comes back with its output, the event a live client saw."""
    published: dict[int, dict[str, Any]] = {}
    journal = await _tool_step(store, published)
    records = await store.events_after(journal.session_id)
    (end,) = [r for r in records if r.payload.get("state") == "output-available"]
    assert end.payload == published[end.seq]
    assert end.payload["output"] == OUTPUT and OUTPUT_OF not in end.payload
    assert [r.seq for r in records] == sorted(published)


async def test_the_output_is_stored_once_and_in_its_place(tmp_path: Path) -> None:
    published: dict[int, dict[str, Any]] = {}
    async with SqliteStore(tmp_path / "j.db") as store:
        journal = await _tool_step(store, published)
        records = await store.events_after(journal.session_id)
    (end,) = [r for r in records if r.payload.get("state") == "output-available"]
    # Key order too: a replayed frame is the live frame, byte for byte.
    assert list(end.payload.items()) == list(published[end.seq].items())
    conn = sqlite3.connect(tmp_path / "j.db")
    try:
        logged = [
            unpack(kind, json.loads(p))
            for kind, p in conn.execute("SELECT type, payload FROM events")
        ]
        (calls,) = conn.execute("SELECT COUNT(*) FROM tool_calls WHERE output = ?", (OUTPUT,))
    finally:
        conn.close()
    (row,) = [p for p in logged if p.get("state") == "output-available"]
    assert "output" not in row and row[OUTPUT_OF] == "c1"
    assert not any(OUTPUT in json.dumps(p) for p in logged)  # no copy anywhere in the log
    assert calls == (1,)


async def test_an_end_the_call_did_not_take_carries_its_own_output(store: Any) -> None:
    """A call that ended keeps its first end; a later end's row, which would refer to the
    call's row, is logged with its own output instead."""
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("read"), "h:1:1", 30)
    base: dict[str, Any] = {"turn_id": turn.id, "call_id": "c1", "call_index": 0, "name": "f"}
    await store.write_batch([UpsertToolCall(**base, state="output-available", output="first")])
    event = {"type": "tool_state", "call_id": "c1", "state": "output-error", OUTPUT_OF: "c1"}
    row = AppendEvent(session.id, turn.id, event)
    late = UpsertToolCall(**base, state="output-error", output="second", logged=row)
    await store.write_batch([late])
    (call,) = await store.tool_calls(turn.id)
    assert (call.state, call.output) == ("output-available", "first")
    (record,) = [r for r in await store.events_after(session.id) if r.type == "tool_state"]
    assert record.payload == {
        "type": "tool_state",
        "call_id": "c1",
        "state": "output-error",
        "output": "second",
    }


async def test_the_results_message_leaves_the_output_in_its_call_row(tmp_path: Path) -> None:
    """The results message refers to its call's row for the output: the journal holds the
    output once, and every read (the turn's messages, the history, a replayed ``tool_results``
    event) has it back in place."""
    published: dict[int, dict[str, Any]] = {}
    async with SqliteStore(tmp_path / "j.db") as store:
        journal = await _tool_step(store, published)
        (turn,) = await store.turns(journal.session_id)
        stored = await store.turn_messages(turn.id)
        (_, loaded), *_ = await store.turns_with_messages(journal.session_id)
        records = await store.events_after(journal.session_id)
    (results,) = [r for r in records if r.type == "tool_results"]
    assert list(results.payload.items()) == list(published[results.seq].items())
    assert results.payload["message"]["content"][0]["content"] == OUTPUT
    for messages in (stored, loaded):
        assert messages[-1].message == tool_result_message(
            [ToolResultBlock(tool_use_id="c1", content=OUTPUT)]
        )
    conn = sqlite3.connect(tmp_path / "j.db")
    try:
        bodies = [json.loads(b) for (b,) in conn.execute("SELECT body FROM messages")]
    finally:
        conn.close()
    assert not any(OUTPUT in json.dumps(b) for b in bodies)
    (result,) = [b for body in bodies for b in body["content"] if b["type"] == "tool_result"]
    assert result == {"type": "tool_result", "tool_use_id": "c1", "is_error": False} | {
        OUTPUT_IN_CALL: True
    }


async def test_a_result_refers_only_to_an_ended_call_of_its_turn_with_that_output(
    store: Any,
) -> None:
    """A result keeps its content unless its call's row, in the message's turn, has ended with
    exactly that output: a call still running (its output may change), one that ended with
    another output, one with no row here (a late result for another turn's call). The running
    call's row holds the same text when the message is written, and another one later."""
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("read"), "h:1:1", 30)

    def call(call_id: str, state: str, output: str | None) -> UpsertToolCall:
        return UpsertToolCall(
            turn_id=turn.id, call_id=call_id, call_index=0, name="f", state=state, output=output
        )

    long = "x" * SHORTEST_REFERRED  # shorter contents are never referred to
    await store.write_batch(
        [
            call("ended", "output-available", "one\x00" + long),
            call("running", "running", "two" + long),
            call("other", "output-available", "three" + long),
            call("short", "output-available", "ok"),
        ]
    )
    contents = {
        "ended": "one\x00" + long,
        "running": "two" + long,
        "other": "edited" + long,
        "elsewhere": "four" + long,
        "short": "ok",
    }
    message = tool_result_message(
        [ToolResultBlock(tool_use_id=c, content=text) for c, text in contents.items()]
    )
    await store.write_batch([AppendMessage(turn_id=turn.id, message=message)])
    # The running call ends afterwards with another output: the message still says its own.
    await store.write_batch([call("running", "output-available", "late" + long)])
    (_, (read_all,)), *_ = await store.turns_with_messages(session.id)
    (read,) = await store.turn_messages(turn.id)
    expected = dict(contents)
    (ended,) = [c for c in await store.tool_calls(turn.id) if c.call_id == "ended"]
    expected["ended"] = ended.output  # as the backend keeps a NUL
    for got in (read, read_all):
        assert {r.tool_use_id: r.content for r in got.message.tool_results} == expected


async def test_a_fork_keeps_the_outputs_its_results_refer_to(store: Any) -> None:
    published: dict[int, dict[str, Any]] = {}
    journal = await _tool_step(store, published)
    (turn,) = await store.turns(journal.session_id)
    await store.write_batch([EndTurn(turn_id=turn.id, status="completed")])
    fork = await store.fork_session(journal.session_id)
    (copy,) = await store.turns(fork.id)
    history = await load_history(store, fork.id)
    assert history.committed[-1] == tool_result_message(
        [ToolResultBlock(tool_use_id="c1", content=OUTPUT)]
    )
    assert (await store.turn_messages(copy.id))[-1].message == history.committed[-1]


async def test_a_short_output_stays_in_the_message(tmp_path: Path) -> None:
    """Under :data:`SHORTEST_REFERRED` characters, a reference would cost more than the bytes
    it saves: the result keeps its content."""
    async with SqliteStore(tmp_path / "j.db") as store:
        session = await store.create_session(workdir="/w", model="m")
        turn = await store.begin_turn(session.id, user_message("read"), "h:1:1", 30)
        short = "x" * (SHORTEST_REFERRED - 1)
        ended = UpsertToolCall(
            turn_id=turn.id, call_id="c1", call_index=0, name="f", state="output-available"
        )
        message = tool_result_message([ToolResultBlock(tool_use_id="c1", content=short)])
        await store.write_batch(
            [replace(ended, output=short), AppendMessage(turn_id=turn.id, message=message)]
        )
    conn = sqlite3.connect(tmp_path / "j.db")
    try:
        (body,) = conn.execute("SELECT body FROM messages").fetchone()
    finally:
        conn.close()
    assert json.loads(body)["content"][0]["content"] == short


async def test_a_results_message_written_again_still_refers(tmp_path: Path) -> None:
    """A results message replaced in place (the loop's differ from those written ahead) is
    stored as a new one is: the output left in its call's row, and read back whole."""
    published: dict[int, dict[str, Any]] = {}
    async with SqliteStore(tmp_path / "j.db") as store:
        journal = await _tool_step(store, published)
        (turn,) = await store.turns(journal.session_id)
        again = Message(
            role="user",
            content=(ToolResultBlock(tool_use_id="c1", content=OUTPUT), TextBlock(text="note")),
        )
        await replace_message(store, turn.id, None, again)
        assert (await store.turn_messages(turn.id))[-1].message == again
    conn = sqlite3.connect(tmp_path / "j.db")
    try:
        bodies = [b for (b,) in conn.execute("SELECT body FROM messages ORDER BY seq")]
    finally:
        conn.close()
    assert "note" in bodies[-1]
    assert OUTPUT not in bodies[-1]
