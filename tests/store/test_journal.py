"""The journal as the loop's event sink: flush gates (fake clock), authority, retries, O(n)."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from drover.core.events import (
    AssistantMessage,
    Compacted,
    Done,
    Error,
    Incomplete,
    Retry,
    StepStarted,
    TerminalEvent,
    TextDelta,
    ToolDone,
    ToolResults,
    ToolStart,
    ToolState,
    ToolStateChanged,
    TurnStarted,
    UsageReport,
)
from drover.core.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.errors import LeaseLostError, StoreError
from drover.journal.journal import Journal

from .helpers import FakeClock, RecordingStore


@dataclass
class Rig:
    store: RecordingStore
    clock: FakeClock
    journal: Journal
    session_id: str
    turn_id: str
    path: Path
    finished: list[Message] = field(default_factory=list)

    def partial_writes(self) -> list[str]:
        return [args[3] for args in self.store.of("append_partial_text")]

    async def deltas(self, *texts: str, index: int = 0) -> None:
        for text in texts:
            await self.journal.send(TextDelta(text=text, index=index))


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    clock = FakeClock()
    store = RecordingStore(tmp_path / "j.db")
    await store.open()
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("hi"), "h:1:1", 30)
    finished: list[Message] = []
    journal = Journal(
        store,
        session.id,
        clock=clock,
        sleep=clock.sleep,
        on_finished_content=finished.append,
        is_read_only=lambda name: name == "read_file",
        retry_delay=0,
    )
    rig = Rig(store, clock, journal, session.id, turn.id, tmp_path / "j.db", finished)
    await journal.send(TurnStarted(turn_id=turn.id, session_id=session.id, user_message=None))
    await journal.send(StepStarted(step=1))
    store.calls.clear()
    yield rig
    await journal.aclose()
    await store.close()


async def test_time_gate(rig: Rig) -> None:
    await rig.deltas("hello ")
    rig.clock.advance(0.1)
    await rig.deltas("world ")
    assert rig.partial_writes() == []
    rig.clock.advance(0.15)
    await rig.deltas("again ")
    assert rig.partial_writes() == ["hello world again "]


async def test_the_timer_flushes_a_stalled_stream(rig: Rig) -> None:
    await rig.deltas("thinking about ", "it ")
    assert rig.journal.timer_pending
    rig.clock.advance(0.25)
    await rig.store.wait_for(lambda: bool(rig.partial_writes()))
    assert rig.partial_writes() == ["thinking about it "]
    assert not rig.journal.timer_pending


async def test_after_a_pause_the_time_gate_counts_from_the_first_new_delta(rig: Rig) -> None:
    """Nothing buffered for a while (a tool ran): the next delta is not written alone at once
    — the oldest unwritten text is what the 250 ms bound is about — but 250 ms after it."""
    await rig.deltas("one ")
    rig.clock.advance(0.25)
    await rig.store.wait_for(lambda: bool(rig.partial_writes()))
    rig.clock.advance(5.0)  # idle, nothing buffered
    await rig.deltas("two ")
    assert rig.partial_writes() == ["one "]
    rig.clock.advance(0.1)
    await rig.deltas("three ")
    assert rig.partial_writes() == ["one "]
    rig.clock.advance(0.15)  # 250 ms after "two "
    await rig.deltas("four ")
    assert rig.partial_writes() == ["one ", "two three four "]


async def test_size_gate(rig: Rig) -> None:
    chunk = "x" * 99 + " "
    await rig.deltas(*[chunk] * 10)
    assert rig.partial_writes() == []  # 1000 bytes, no time passed
    await rig.deltas("é" * 12 + " ")  # 25 bytes: 1025 ≥ 1024
    assert rig.partial_writes() == [chunk * 10 + "é" * 12 + " "]


async def test_eager_flush_when_a_tool_call_begins_and_when_its_input_is_complete(
    rig: Rig,
) -> None:
    # The text before a tool_use is finished: all of it is written before the call's state,
    # the tail a key could start with included.
    await rig.deltas("Let me look at sk-abc")
    streaming = ToolStateChanged(call_id="c1", call_index=0, name="bash", state="input-streaming")
    await rig.journal.send(streaming)
    # In one transaction with the write deferred before it (the rig's step_started event).
    assert rig.store.names() == [
        "append_event",
        "append_partial_text",
        "upsert_tool_call",
        "append_event",
    ]
    assert rig.partial_writes() == ["Let me look at sk-abc"]
    rig.store.calls.clear()
    await rig.deltas("Let me look. ")  # text after a call began (rare): flushed at its end
    await rig.journal.send(
        ToolStateChanged(
            call_id="c1",
            call_index=0,
            name="bash",
            state="input-available",
            input={"command": "ls"},
        )
    )
    assert rig.store.names() == ["append_partial_text", "upsert_tool_call", "append_event"]
    assert rig.partial_writes() == ["Let me look. "]
    (recorded,) = await rig.store.tool_calls(rig.turn_id)  # persisted before send returned
    assert (recorded.state, recorded.input, recorded.step) == (
        "input-available",
        {"command": "ls"},
        1,
    )


async def test_tool_states_are_recorded_with_read_only(rig: Rig) -> None:
    states: tuple[ToolState, ...] = ("input-available", "running", "output-available")
    for state in states:
        await rig.journal.send(
            ToolStateChanged(
                call_id="r1",
                call_index=0,
                name="read_file",
                state=state,
                input={"path": "a"} if state == "input-available" else None,
                output="text" if state == "output-available" else None,
            )
        )
    (call,) = await rig.store.tool_calls(rig.turn_id)
    assert (call.state, call.read_only, call.output, call.input) == (
        "output-available",
        True,
        "text",
        {"path": "a"},
    )


async def test_the_finished_message_is_authoritative_and_cancels_the_timer(rig: Rig) -> None:
    await rig.deltas("The answer ")
    rig.clock.advance(0.25)
    await rig.store.wait_for(lambda: bool(rig.partial_writes()))
    await rig.deltas("is 42.")
    assert rig.journal.timer_pending
    rig.store.calls.clear()
    message = assistant_message([TextBlock(text="The answer is 42.")])
    await rig.journal.send(AssistantMessage(message=message))
    assert not rig.journal.timer_pending
    # The text live consumers saw since the last flush is written first (the log holds every
    # numbered delta), then the message, which folds the step's text rows.
    assert rig.store.names() == ["append_partial_text", "append_message", "append_event"]
    assert rig.store.of("append_partial_text")[0][3] == "is 42."
    assert rig.store.of("append_message")[0][1:] == (message, False, 1)
    stored = await rig.store.turn_messages(rig.turn_id)
    assert [(s.message, s.partial) for s in stored] == [(message, False)]  # deltas are gone
    rig.clock.advance(1)
    rig.store.calls.clear()
    await rig.journal.send(UsageReport(usage=Usage(), total_input=0, total_output=0))
    assert "append_partial_text" not in rig.store.names()
    assert rig.finished == [message]


async def test_finished_content_hook_sees_finished_content_only(rig: Rig) -> None:
    cut = assistant_message([TextBlock(text="cut", partial=True)])
    await rig.journal.send(AssistantMessage(message=cut, partial=True))
    results = tool_result_message([ToolResultBlock(tool_use_id="x", content="ok")])
    await rig.journal.send(ToolResults(message=results))
    assert rig.finished == [results]
    stored = await rig.store.turn_messages(rig.turn_id)
    assert [(s.message, s.partial) for s in stored] == [(cut, True), (results, False)]


async def test_a_failed_write_is_retried_before_send_returns(rig: Rig) -> None:
    chunk = "y" * 127 + " "
    rig.store.failures["append_partial_text"] = 1
    await rig.deltas(*[chunk] * 8)  # 1024 bytes: the flush fails once and is made again
    # The batch (the rig's deferred step_started, then the flush) fails on the flush; made again
    # one write at a time, in order.
    assert rig.store.names() == ["append_partial_text!", "append_event", "append_partial_text"]
    assert rig.journal.backlog == 0
    assert rig.journal.failure is None
    (synth,) = await rig.store.turn_messages(rig.turn_id)
    assert synth.message.text == chunk * 8


async def test_failed_event_writes_keep_their_order(rig: Rig) -> None:
    rig.store.failures["append_event"] = 2
    await rig.journal.send(StepStarted(step=2))
    await rig.journal.send(Compacted(messages_before=9, messages_after=3))
    await rig.journal.send(StepStarted(step=3))
    assert rig.journal.backlog == 4  # deferred (the rig's step too): nothing waits on them
    rig.clock.advance(0.25)  # the flush timer writes them
    await rig.store.wait_for(lambda: rig.journal.backlog == 0)
    events = await rig.store.events_after(rig.session_id)
    assert [e.type for e in events] == [
        "turn_started",
        "step_started",
        "step_started",
        "compacted",
        "step_started",
    ]
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]


async def test_a_write_that_keeps_failing_fails_the_journal(rig: Rig) -> None:
    failures: list[StoreError] = []
    journal = Journal(
        rig.store,
        rig.session_id,
        turn_id=rig.turn_id,
        max_attempts=3,
        retry_delay=0,
        on_failure=failures.append,
    )
    await journal.send(StepStarted(step=1))
    rig.store.failures["append_event"] = 10**6
    await journal.send(StepStarted(step=2))
    await journal.aclose()  # writes what was deferred: does not raise
    assert journal.failure is not None
    assert failures == [journal.failure]
    assert "log the step_started event after 3 tries" in str(journal.failure)
    assert isinstance(journal.failure.__cause__, StoreError)  # the original error is kept
    # Once together with the write after it, then three times alone.
    assert rig.store.names().count("append_event!") == 1 + 3
    # Nothing more is written: the record stays a consistent prefix of the turn.
    rig.store.failures.clear()
    calls = len(rig.store.calls)
    await journal.send(Done(text="x", usage=Usage()))
    await journal.aclose()
    assert len(rig.store.calls) == calls
    assert not journal.ended
    turn = (await rig.store.turns(rig.session_id))[0]
    assert turn.status == "running"


async def test_a_write_to_a_turn_another_process_recovered_fails_at_once(rig: Rig) -> None:
    failures: list[StoreError] = []
    journal = Journal(
        rig.store,
        rig.session_id,
        turn_id=rig.turn_id,
        owner="h:1:1",
        retry_delay=0,
        on_failure=failures.append,
    )
    assert await rig.store.recover_orphans(is_alive=lambda owner: False) == [rig.turn_id]
    await journal.send(AssistantMessage(message=assistant_message([TextBlock(text="late")])))
    assert isinstance(journal.failure, StoreError)
    assert isinstance(journal.failure.__cause__, LeaseLostError)
    assert rig.store.names().count("append_message!") == 0  # refused by the store, not retried
    stored = await rig.store.turn_messages(rig.turn_id)
    assert all(m.message.text != "late" for m in stored)
    assert (await rig.store.turns(rig.session_id))[0].status == "interrupted"


async def test_the_end_of_a_turn_needs_its_owner(rig: Rig) -> None:
    journal = Journal(
        rig.store, rig.session_id, turn_id=rig.turn_id, owner="other:2:2", retry_delay=0
    )
    await journal.send(Done(text="x", usage=Usage()))
    assert isinstance(journal.failure, StoreError)
    assert isinstance(journal.failure.__cause__, LeaseLostError)
    assert (await rig.store.turns(rig.session_id))[0].status == "running"


@pytest.mark.parametrize(
    ("event", "status"),
    [
        (Done(text="ok", usage=Usage(output_tokens=3)), "completed"),
        (Incomplete(reason="error", error="HTTP 500", usage=Usage()), "incomplete"),
        (Incomplete(reason="interrupted", error="stopped", usage=Usage()), "interrupted"),
        (Error(reason="error", error="HTTP 401", usage=Usage()), "failed"),
    ],
)
async def test_terminal_events_end_the_turn(rig: Rig, event: TerminalEvent, status: str) -> None:
    await rig.deltas("left ", "over")  # never finished by a message: flushed whole, then folded
    await rig.journal.send(event)
    (turn,) = await rig.store.turns(rig.session_id)
    assert turn.status == status
    assert turn.usage == event.usage
    assert turn.reason == (None if isinstance(event, Done) else event.reason)
    (stored,) = await rig.store.turn_messages(rig.turn_id)
    assert stored.partial
    assert stored.message.text == "left over"
    assert (await rig.store.events_after(rig.session_id))[-1].type == event.type


async def test_a_retry_that_discards_drops_the_partial_text(rig: Rig) -> None:
    await rig.deltas("first attempt ")
    rig.clock.advance(0.25)
    await rig.store.wait_for(lambda: bool(rig.partial_writes()))
    await rig.deltas("more ")
    await rig.journal.send(Retry(attempt=1, delay=1.0, error="overloaded", discard_partial=True))
    assert await rig.store.turn_messages(rig.turn_id) == []
    await rig.deltas("second ")
    await rig.journal.aclose()
    (synth,) = await rig.store.turn_messages(rig.turn_id)
    assert synth.message.text == "second "


async def test_replay_reconstructs_the_text_from_the_event_log(rig: Rig) -> None:
    await rig.deltas("one ", "two ", index=0)
    rig.clock.advance(0.25)
    await rig.store.wait_for(lambda: len(rig.partial_writes()) == 1)
    await rig.deltas("three ", index=0)
    await rig.journal.send(
        ToolStateChanged(call_id="c", call_index=0, name="bash", state="input-available", input={})
    )
    message = assistant_message(
        [TextBlock(text="one two three "), ToolUseBlock(id="c", name="bash", input={})]
    )
    await rig.journal.send(AssistantMessage(message=message))
    events = await rig.store.events_after(rig.session_id)
    text = "".join(e.payload["text"] for e in events if e.type == "text_delta")
    assert text == "one two three "
    assert events[-1].payload["message"]["content"][0]["text"] == text
    # Each row covers its numbers (a coalesced row those of its deltas): 1, 2, 3… no gap.
    assert events[0].seq == 1
    assert all(b.seq == a.end_seq + 1 for a, b in itertools.pairwise(events))


async def test_an_answer_costs_linear_bytes(rig: Rig) -> None:
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    answer = " ".join(words[i % 6] + str(i) for i in range(14_000))[: 100_000 - 1] + "\n"
    deltas = [answer[i : i + 10] for i in range(0, len(answer), 10)]
    for delta in deltas:
        rig.clock.advance(0.001)
        await rig.deltas(delta)
    rig.clock.advance(1)
    await rig.store.wait_for(lambda: sum(map(len, rig.partial_writes())) == len(answer))
    writes = rig.partial_writes()
    assert "".join(writes) == answer
    assert len(writes) <= len(answer) // 1024 + 2  # one write per ~1 KiB, not per delta

    conn = sqlite3.connect(rig.path)
    stored = conn.execute("SELECT SUM(LENGTH(text)) FROM partial_text").fetchone()[0]
    assert stored == len(answer)

    await rig.journal.send(AssistantMessage(message=assistant_message([TextBlock(text=answer)])))
    assert len(rig.store.of("append_message")) == 1
    assert conn.execute("SELECT COUNT(*) FROM partial_text").fetchone()[0] == 0
    (body,) = conn.execute("SELECT body FROM messages").fetchone()
    assert body.count(answer[:-1]) == 1
    logged = conn.execute(
        "SELECT SUM(LENGTH(payload)) + SUM(COALESCE(LENGTH(marks), 0)) FROM events"
    ).fetchone()[0]
    # The answer once, in the finished message: its coalesced rows are folded into one that
    # refers to the message's text and keeps where each delta ended (~5 bytes per delta).
    assert conn.execute("SELECT COUNT(*) FROM events WHERE type = 'text_delta'").fetchone() == (1,)
    assert logged < 6 * len(deltas) + 1000
    # The pages the folded rows left free went back to the file system (auto_vacuum).
    assert conn.execute("PRAGMA freelist_count").fetchone() == (0,)
    conn.close()
    records = await rig.store.events_after(rig.session_id)
    (folded,) = [r for r in records if r.type == "text_delta"]
    assert folded.payload["text"] == answer  # all of it was flushed before the message
    assert len(folded.marks or ()) == len(deltas)  # a replay can still start after any delta


async def test_writes_ready_together_commit_together(rig: Rig) -> None:
    """A tool step's writes in four transactions: the eager flush with the call's first state,
    the assistant message, the call about to run, its end with the results message (the step's
    last call); the rest rides along."""
    streaming = ToolStateChanged(call_id="c1", call_index=0, name="bash", state="input-streaming")
    available = ToolStateChanged(
        call_id="c1", call_index=0, name="bash", state="input-available", input={"c": 1}
    )
    use = ToolUseBlock(id="c1", name="bash", input={"c": 1})
    message = assistant_message([TextBlock(text="Plan. "), use])
    results = tool_result_message([ToolResultBlock(tool_use_id="c1", content="out")])
    batches: list[int] = []
    write_batch = rig.store.write_batch

    async def counted(writes: Any) -> list[Any]:
        batches.append(len(writes))
        return await write_batch(writes)

    rig.store.write_batch = counted  # type: ignore[method-assign]
    await rig.deltas("Plan. ")
    await rig.journal.send(streaming)
    await rig.journal.send(available)
    await rig.journal.send(UsageReport(usage=Usage(output_tokens=3), total_input=1, total_output=3))
    await rig.journal.send(AssistantMessage(message=message))
    await rig.journal.send(ToolStateChanged(**{**_fields(available), "state": "running"}))
    await rig.journal.send(ToolStart(call_index=0, id="c1", name="bash", input_summary="bash"))
    done = ToolStateChanged(
        call_id="c1", call_index=0, name="bash", state="output-available", output="out"
    )
    await rig.journal.send(done)
    (call,) = await rig.store.tool_calls(rig.turn_id)  # durable before send returned
    assert (call.state, call.output) == ("output-available", "out")
    # ... and so is the step's results message, before the loop even sends it.
    stored = [m.message for m in await rig.store.turn_messages(rig.turn_id)]
    assert stored == [message, results]
    await rig.journal.send(
        ToolDone(call_index=0, id="c1", name="bash", is_error=False, output_summary="out")
    )
    await rig.journal.send(ToolResults(message=results))
    # (the end's log row is made inside the call's write: it refers to the call's output)
    assert batches == [4, 4, 2, 3] and rig.journal.backlog == 2  # tool_done, tool_results rows
    assert [m.message for m in await rig.store.turn_messages(rig.turn_id)] == stored
    await rig.journal.send(StepStarted(step=2))
    assert rig.journal.backlog == 3
    rig.clock.advance(0.25)  # what nothing waits on is written by the timer, at the latest
    await rig.store.wait_for(lambda: rig.journal.backlog == 0)
    assert batches == [4, 4, 2, 3, 3]  # the message carries its log row: one write
    stored = await rig.store.turn_messages(rig.turn_id)
    assert [s.message for s in stored][:2] == [message, results]


def _fields(event: ToolStateChanged) -> dict[str, Any]:
    return {f: getattr(event, f) for f in ("call_id", "call_index", "name", "input")}


async def test_the_done_event_refers_to_the_answer_and_reads_back_whole(rig: Rig) -> None:
    published: list[dict[str, Any]] = []
    journal = Journal(
        rig.store,
        rig.session_id,
        turn_id=rig.turn_id,
        publish=lambda seq, turn_id, payload, prev: published.append(payload),
    )
    answer = "The answer is 42. " * 50
    await journal.send(StepStarted(step=2))
    await journal.send(AssistantMessage(message=assistant_message([TextBlock(text=answer)])))
    await journal.send(Done(text=answer, usage=Usage(output_tokens=3)))
    # Stored once: the event holds the message's number, not its text.
    conn = sqlite3.connect(rig.path)
    (raw,) = conn.execute("SELECT payload FROM events WHERE type = 'done'").fetchone()
    conn.close()
    assert answer not in raw and '"text_of":1' in raw
    # Read back (replay, `drover show`) and published live as it always was.
    (done,) = [e for e in await rig.store.events_after(rig.session_id) if e.type == "done"]
    assert (
        dict(done.payload)
        == published[-1]
        == {
            "type": "done",
            "text": answer,
            "usage": Usage(output_tokens=3).to_dict(),
        }
    )
    assert list(done.payload) == ["type", "text", "usage"]  # same order on the wire


async def test_a_done_text_that_is_not_the_last_message_is_kept(rig: Rig) -> None:
    await rig.journal.send(AssistantMessage(message=assistant_message([TextBlock(text="a")])))
    await rig.journal.send(Done(text="something else", usage=Usage()))
    (done,) = [e for e in await rig.store.events_after(rig.session_id) if e.type == "done"]
    assert done.payload["text"] == "something else" and "text_of" not in done.payload
