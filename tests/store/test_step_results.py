"""A tool step's results message goes with its last call's end (one transaction fewer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drover.core.events import AssistantMessage, ToolResults, ToolStateChanged
from drover.core.messages import (
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.journal.journal import Journal
from drover.store.sqlite.store import SqliteStore

from .helpers import FakeClock


def _end(call_id: str, index: int, output: str, *, error: bool = False) -> ToolStateChanged:
    state = "output-error" if error else "output-available"
    return ToolStateChanged(
        call_id=call_id, call_index=index, name="bash", state=state, output=output, is_error=error
    )


async def _step(tmp_path: Path) -> tuple[SqliteStore, Journal, str, list[int]]:
    store = SqliteStore(tmp_path / "j.db")
    await store.open()
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("hi"), "h:1:1", 30)
    clock = FakeClock()
    journal = Journal(store, session.id, clock=clock, sleep=clock.sleep, turn_id=turn.id)
    batches: list[int] = []
    write_batch = store.write_batch

    async def counted(writes: Any) -> list[Any]:
        batches.append(len(writes))
        return await write_batch(writes)

    store.write_batch = counted  # type: ignore[method-assign]
    uses = [ToolUseBlock(id=c, name="bash", input={"n": i}) for i, c in enumerate(("a", "b"))]
    await journal.send(AssistantMessage(message=assistant_message([TextBlock(text="Go. "), *uses])))
    return store, journal, turn.id, batches


async def test_the_last_calls_end_carries_the_results_message(tmp_path: Path) -> None:
    store, journal, turn_id, batches = await _step(tmp_path)
    try:
        # The calls end out of order; the message keeps the order of the tool_use blocks.
        await journal.send(_end("b", 1, "second", error=True))
        assert len(await store.turn_messages(turn_id)) == 1  # not before the last call ends
        before = len(batches)
        await journal.send(_end("a", 0, "first"))
        assert len(batches) == before + 1  # the end and the message: one transaction
        results = tool_result_message(
            [
                ToolResultBlock(tool_use_id="a", content="first"),
                ToolResultBlock(tool_use_id="b", content="second", is_error=True),
            ]
        )
        stored = [m.message for m in await store.turn_messages(turn_id)]
        assert stored[1:] == [results]
        await journal.send(ToolResults(message=results))
        await journal.aclose()
        stored = [m.message for m in await store.turn_messages(turn_id)]
        assert stored[1:] == [results]  # written once
        assert [e.type for e in await store.events_after(journal.session_id)][-1] == (
            "tool_results"
        )
    finally:
        await store.close()


async def test_a_results_message_that_differs_replaces_the_one_written_ahead(
    tmp_path: Path,
) -> None:
    store, journal, turn_id, _ = await _step(tmp_path)
    try:
        await journal.send(_end("a", 0, "first"))
        await journal.send(_end("b", 1, "second"))
        sent = tool_result_message(
            [
                ToolResultBlock(tool_use_id="a", content="first"),
                ToolResultBlock(tool_use_id="b", content="second, as the loop saw it"),
            ]
        )
        await journal.send(ToolResults(message=sent))
        stored = await store.turn_messages(turn_id)
        assert [m.message for m in stored][1:] == [sent]
        assert [m.seq for m in stored] == [1, 2]
    finally:
        await journal.aclose()
        await store.close()
