"""The journal's per-event path: what it does once, and what it does without a coroutine or a
task (numbering inside the reservation, the flush timer), with the guarantees unchanged."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

from drover.core.events import (
    AssistantMessage,
    StepStarted,
    TextDelta,
    ToolResults,
    ToolStateChanged,
    TurnStarted,
)
from drover.core.messages import (
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.journal.journal import Journal
from drover.journal.numbering import Numbering
from drover.journal.redact import REDACTED, Redactor
from drover.journal.writes import MESSAGE_OF, OUTPUT_OF
from drover.store.sql.log_shapes import unpack
from drover.store.sqlite.store import SqliteStore

from .helpers import RecordingStore

AWS = "AKIAIOSFODNN7EXAMPLE"


class CountingRedactor(Redactor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def redact(self, text: str) -> str:
        self.seen.append(text)
        return super().redact(text)


async def _journal(store: SqliteStore, **kwargs: Any) -> Journal:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("hi"), "h:1:1", 30)
    journal = Journal(store, session.id, **kwargs)
    await journal.send(TurnStarted(turn_id=turn.id, session_id=session.id, user_message=None))
    await journal.send(StepStarted(step=1))
    return journal


def _logged(path: Path, kind: str) -> list[dict[str, Any]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT payload FROM events WHERE type = ? ORDER BY seq", (kind,))
        payloads = [unpack(kind, json.loads(payload)) for (payload,) in rows]
    conn.close()
    return payloads


async def test_a_tool_output_is_redacted_once_in_its_step(tmp_path: Path) -> None:
    """For the call's log row, its row in ``tool_calls`` and the step's results message
    (written with the call's end, and the loop's ``tool_results`` equal to it)."""
    redactor = CountingRedactor()
    output = f"AWS_ACCESS_KEY_ID={AWS} (the one output)"
    redacted = f"AWS_ACCESS_KEY_ID={REDACTED} (the one output)"
    call = ToolUseBlock(id="c", name="bash", input={"command": "env"})
    async with SqliteStore(tmp_path / "j.db") as store:
        journal = await _journal(store, redactor=redactor)
        await journal.send(AssistantMessage(message=assistant_message([call])))
        state = ToolStateChanged(
            call_id="c",
            call_index=0,
            name="bash",
            state="output-error",
            output=output,
            is_error=True,
        )
        await journal.send(state)
        result = ToolResultBlock(tool_use_id="c", content=output, is_error=True)
        await journal.send(ToolResults(message=tool_result_message([result])))
        await journal.aclose()
        (stored_call,) = await store.tool_calls(journal.turn_id)
        messages = await store.turn_messages(journal.turn_id or "")
        read = await store.events_after(journal.session_id)
    assert redactor.seen.count(output) == 1
    assert stored_call.output == redacted
    assert messages[-1].message.content == (replace(result, content=redacted),)
    # The end's log row refers to the call's row for its output, read back in place.
    (ended,) = _logged(tmp_path / "j.db", "tool_state")
    assert "output" not in ended and ended[OUTPUT_OF] == "c"
    assert [r.payload["output"] for r in read if r.type == "tool_state"] == [redacted]
    (row,) = _logged(tmp_path / "j.db", "tool_results")
    assert MESSAGE_OF in row  # refers to the message written with the call's end


async def test_a_message_losing_a_signature_to_redaction_is_still_stored_once(
    tmp_path: Path,
) -> None:
    """The log row of a finished message is built from the message as stored (redacted once),
    so it refers to the message even when redaction changed more than the text (a thinking
    block whose text changed loses its signature)."""
    message = assistant_message(
        [ThinkingBlock(thinking=f"the key is {AWS}", signature="sig"), TextBlock(text="done")]
    )
    async with SqliteStore(tmp_path / "j.db") as store:
        journal = await _journal(store)
        await journal.send(AssistantMessage(message=message))
        await journal.aclose()
        (stored,) = await store.turn_messages(journal.turn_id or "")
    assert stored.message.content[0] == ThinkingBlock(thinking=f"the key is {REDACTED}")
    (row,) = _logged(tmp_path / "j.db", "assistant_message")
    assert MESSAGE_OF in row and "message" not in row
    with sqlite3.connect(tmp_path / "j.db") as conn:
        raw = b"".join(bytes(str(r), "utf-8") for r in conn.execute("SELECT * FROM events"))
    conn.close()
    assert AWS.encode() not in raw


async def test_the_flush_timer_is_no_task_until_it_fires(tmp_path: Path) -> None:
    """With the event loop's own sleep the timer started (and mostly cancelled) a few times a
    step is a timer callback: no task, no wake-up; it still flushes a stalled stream."""
    async with RecordingStore(tmp_path / "j.db") as store:
        journal = await _journal(store, flush_interval=0.05)
        await journal.send(TextDelta(text="thinking about it "))
        assert journal.timer_pending
        assert asyncio.all_tasks() == {asyncio.current_task()}
        await store.wait_for(lambda: bool(store.of("append_partial_text")))
        assert [args[3] for args in store.of("append_partial_text")] == ["thinking about it "]
        assert not journal.timer_pending
        # Cancelled by a flush before it fires: nothing is left behind.
        await journal.send(TextDelta(text="and more "))
        assert journal.timer_pending
        await journal.send(
            ToolStateChanged(call_id="c", call_index=0, name="bash", state="input-streaming")
        )
        assert not journal.timer_pending
        assert asyncio.all_tasks() == {asyncio.current_task()}
        await journal.aclose()


async def test_numbers_inside_the_reservation_are_handed_out_without_a_coroutine(
    tmp_path: Path,
) -> None:
    async with SqliteStore(tmp_path / "j.db") as store:
        session = await store.create_session(workdir="/w", model="m")
        numbers = Numbering(store, session.id, block=3)
        assert numbers.take_now() is None  # not started: take() asks the store
        assert await numbers.take() == 1  # and reserves 1-3
        assert [numbers.take_now(), numbers.take_now()] == [2, 3]
        assert numbers.take_now() is None  # past the reservation
        assert await numbers.take() == 4
        assert numbers.take_now() == 5
        assert not numbers.observed
        assert Numbering(store, session.id, publish=lambda *_: None).observed
