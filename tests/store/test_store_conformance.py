"""The conformance suite: every Store method, run against every backend in ``BACKENDS``."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from support.writes import (
    append_event,
    append_message,
    append_partial_text,
    discard_partial_text,
    end_turn,
    upsert_tool_call,
)

from drover.core.events import MAY_HAVE_RUN_TEXT, NOT_RUN_TEXT
from drover.core.messages import (
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    assistant_message,
    tool_result_message,
    user_message,
)
from drover.errors import LeaseLostError, SessionBusyError, StoreError
from drover.journal.protocol import Store
from drover.journal.records import TurnRecord
from drover.journal.rules import TITLE_CHARS

from .conftest import StoreFactory

OWNER = "elsewhere:42:7"


async def _turn(store: Store, prompt: str | None = "hello") -> tuple[str, str]:
    session = await store.create_session(workdir="/w", model="fake:m")
    turn = await store.begin_turn(
        session.id, None if prompt is None else user_message(prompt), OWNER, 30
    )
    return session.id, turn.id


# -- sessions --------------------------------------------------------------------------------


async def test_sessions_create_get_list_latest(store: Store) -> None:
    a = await store.create_session(workdir="/a", model="anthropic:x")
    b = await store.create_session(session_id="custom-id", workdir="/b", model="openai:y")
    c = await store.create_session(workdir="/a", model="anthropic:x")
    assert b.id == "custom-id"
    assert a.title is None
    assert a.workdir == "/a"
    assert a.model == "anthropic:x"
    assert await store.get_session(b.id) == b
    assert await store.get_session("missing") is None
    listed = await store.list_sessions()
    assert [s.id for s in listed] == [c.id, b.id, a.id]
    assert [s.id for s in await store.list_sessions(limit=2)] == [c.id, b.id]
    assert (await store.latest_session("/a")) == c
    assert await store.latest_session("/nowhere") is None
    # A new turn makes its session the latest one.
    await store.begin_turn(a.id, user_message("x"), OWNER, 30)
    latest = await store.latest_session("/a")
    assert latest is not None
    assert latest.id == a.id


async def test_duplicate_session_id_is_an_error(store: Store) -> None:
    await store.create_session(session_id="s1", workdir="/w", model="m")
    with pytest.raises(StoreError, match="already exists"):
        await store.create_session(session_id="s1", workdir="/w", model="m")


async def test_set_session_model(store: Store) -> None:
    session = await store.create_session(workdir="/w", model="anthropic:a")
    await store.set_session_model(session.id, "openai:b")
    got = await store.get_session(session.id)
    assert got is not None
    assert got.model == "openai:b"
    with pytest.raises(StoreError):
        await store.set_session_model("missing", "m")


# -- turns -----------------------------------------------------------------------------------


async def test_begin_turn_orders_turns_and_sets_the_title(store: Store) -> None:
    session = await store.create_session(workdir="/w", model="m")
    long_prompt = "fix   the\nbug " + "x" * 200
    first = await store.begin_turn(session.id, user_message(long_prompt), OWNER, 30)
    # Never two running turns in one session: the second waits for the first to end.
    with pytest.raises(SessionBusyError) as busy:
        await store.begin_turn(session.id, None, OWNER, 30)
    assert busy.value.turn_id == first.id
    await end_turn(store, first.id, "completed")
    second = await store.begin_turn(session.id, None, OWNER, 30)
    assert (first.seq, second.seq) == (1, 2)
    assert first.status == "running"
    assert first.owner == OWNER
    assert first.lease_expires_at is not None
    assert first.lease_expires_at > first.created_at
    assert first.user_message == user_message(long_prompt)
    assert second.user_message is None
    got = await store.get_session(session.id)
    assert got is not None
    assert got.title is not None
    assert got.title.startswith("fix the bug xxx")
    assert len(got.title) == TITLE_CHARS
    assert [t.id for t in await store.turns(session.id)] == [first.id, second.id]
    with pytest.raises(StoreError):
        await store.begin_turn("missing", None, OWNER, 30)


async def test_renew_lease(store: Store) -> None:
    _, turn_id = await _turn(store)
    before = (await _only_turn(store, turn_id)).lease_expires_at
    assert await store.renew_lease(turn_id, OWNER, 3600)
    after = (await _only_turn(store, turn_id)).lease_expires_at
    assert before is not None
    assert after is not None
    assert after > before
    assert not await store.renew_lease(turn_id, "someone-else:1:1", 3600)
    await end_turn(store, turn_id, "completed")
    assert not await store.renew_lease(turn_id, OWNER, 3600)


async def _only_turn(store: Store, turn_id: str) -> TurnRecord:
    for session in await store.list_sessions(limit=1000):
        for turn in await store.turns(session.id):
            if turn.id == turn_id:
                return turn
    raise AssertionError(turn_id)


@pytest.mark.parametrize("status", ["completed", "incomplete", "failed", "interrupted"])
async def test_end_turn_records_the_outcome(store: Store, status: str) -> None:
    _, turn_id = await _turn(store)
    usage = Usage(input_tokens=10, output_tokens=5, partial=True)
    await end_turn(store, turn_id, status, reason="error", error="boom", usage=usage)  # type: ignore[arg-type]
    turn = await _only_turn(store, turn_id)
    assert turn.status == status
    assert turn.reason == "error"
    assert turn.error == "boom"
    assert turn.usage == usage
    assert turn.ended_at is not None
    assert turn.lease_expires_at is None
    with pytest.raises(StoreError):
        await end_turn(store, turn_id, "running")
    with pytest.raises(StoreError):
        await end_turn(store, "missing", "completed")


async def test_only_a_running_turn_takes_writes_and_only_its_owner_ends_it(
    store: Store,
) -> None:
    _, turn_id = await _turn(store)
    with pytest.raises(LeaseLostError):
        await end_turn(store, turn_id, "completed", owner="someone-else:1:1")
    await end_turn(store, turn_id, "completed", owner=OWNER)
    # A turn that ended (or that another process recovered) is closed for good.
    with pytest.raises(LeaseLostError):
        await end_turn(store, turn_id, "interrupted")
    with pytest.raises(LeaseLostError):
        await append_message(store, turn_id, assistant_message([TextBlock(text="late")]))
    with pytest.raises(LeaseLostError):
        await append_partial_text(store, turn_id, 1, 0, "late")
    with pytest.raises(LeaseLostError):
        await upsert_tool_call(store, turn_id, "c", call_index=0, name="bash", state="running")
    with pytest.raises(LeaseLostError):
        await discard_partial_text(store, turn_id, 1)
    assert (await _only_turn(store, turn_id)).status == "completed"
    assert await store.turn_messages(turn_id) == []
    assert await store.tool_calls(turn_id) == []


async def test_end_turn_leaves_nothing_in_progress(store: Store) -> None:
    session_id, turn_id = await _turn(store)
    await upsert_tool_call(store, turn_id, "c1", call_index=0, name="bash", state="running")
    await upsert_tool_call(
        store, turn_id, "c2", call_index=1, name="read_file", state="running", read_only=True
    )
    await upsert_tool_call(store, turn_id, "c3", call_index=2, name="bash", state="input-available")
    await upsert_tool_call(
        store, turn_id, "c4", call_index=3, name="bash", state="output-available", output="ok"
    )
    await append_partial_text(store, turn_id, 2, 0, "half an ans")
    await end_turn(store, turn_id, "interrupted", reason="interrupted", error="stop")
    calls = {c.call_id: c for c in await store.tool_calls(turn_id)}
    assert {c.state for c in calls.values()} == {"interrupted", "output-available"}
    assert calls["c1"].outcome_unknown
    assert calls["c1"].output == MAY_HAVE_RUN_TEXT
    assert not calls["c2"].outcome_unknown
    assert not calls["c3"].outcome_unknown
    assert calls["c3"].output == NOT_RUN_TEXT
    assert calls["c4"].output == "ok"
    assert not calls["c4"].is_error
    (stored,) = await store.turn_messages(turn_id)
    assert stored.partial
    assert stored.message.content == (TextBlock(text="half an ans", partial=True),)
    types = [e.type for e in await store.events_after(session_id)]
    assert types == ["text_delta", "tool_state", "tool_state", "tool_state", "assistant_message"]


async def test_discard_pending(store: Store) -> None:
    session = await store.create_session(workdir="/w", model="m")
    ids = []
    for status in ("incomplete", "completed", "failed", "interrupted"):
        turn = await store.begin_turn(session.id, user_message(status), OWNER, 30)
        await end_turn(store, turn.id, status)
        ids.append(turn.id)
    running = await store.begin_turn(session.id, user_message("now"), OWNER, 30)
    assert await store.discard_pending(session.id) == ids[2:]
    assert await store.discard_pending(session.id) == []
    turns = {t.id: t for t in await store.turns(session.id)}
    assert [turns[i].discarded for i in ids] == [False, False, True, True]
    assert not turns[running.id].discarded


# -- the turn's work -------------------------------------------------------------------------


async def test_messages_in_order_with_partial_flag(store: Store) -> None:
    _, turn_id = await _turn(store)
    call = ToolUseBlock(id="t1", name="bash", input={"command": "ls"})
    first = assistant_message([TextBlock(text="listing"), call])
    results = tool_result_message([ToolResultBlock(tool_use_id="t1", content="a b")])
    cut = assistant_message([TextBlock(text="and th", partial=True)])
    assert await append_message(store, turn_id, first) == 1
    assert await append_message(store, turn_id, results) == 2
    assert await append_message(store, turn_id, cut, partial=True) == 3
    stored = await store.turn_messages(turn_id)
    assert [(s.seq, s.message, s.partial) for s in stored] == [
        (1, first, False),
        (2, results, False),
        (3, cut, True),
    ]
    with pytest.raises(StoreError):
        await append_message(store, "missing", first)


async def test_partial_text_is_synthesized_then_compacted(store: Store) -> None:
    session_id, turn_id = await _turn(store)
    seqs = [
        await append_partial_text(store, turn_id, 1, 0, "Hel"),
        await append_partial_text(store, turn_id, 1, 0, "lo "),
        await append_partial_text(store, turn_id, 1, 2, "second block"),
    ]
    assert seqs == [1, 2, 3]
    (synth,) = await store.turn_messages(turn_id)
    assert synth.partial
    assert synth.seq == 1
    assert synth.message == assistant_message(
        [TextBlock(text="Hello ", partial=True), TextBlock(text="second block", partial=True)]
    )
    events = await store.events_after(session_id)
    assert [e.payload for e in events] == [
        {"type": "text_delta", "text": "Hel", "index": 0, "step": 1},
        {"type": "text_delta", "text": "lo ", "index": 0, "step": 1},
        {"type": "text_delta", "text": "second block", "index": 2, "step": 1},
    ]
    # The finished message supersedes the step's deltas, in the same write.
    final = assistant_message([TextBlock(text="Hello "), TextBlock(text="second block")])
    await append_message(store, turn_id, final, step=1)
    assert [(s.message, s.partial) for s in await store.turn_messages(turn_id)] == [(final, False)]


async def test_discard_partial_text_of_one_step(store: Store) -> None:
    _, turn_id = await _turn(store)
    await append_partial_text(store, turn_id, 1, 0, "retried")
    await append_partial_text(store, turn_id, 2, 0, "kept")
    await discard_partial_text(store, turn_id, 1)
    (synth,) = await store.turn_messages(turn_id)
    assert synth.message.text == "kept"


async def test_turns_with_messages_reads_every_turn_at_once(store: Store) -> None:
    session_id, first = await _turn(store)
    answer = assistant_message([TextBlock(text="one")])
    await append_message(store, first, answer)
    await end_turn(store, first, "completed")
    second = await store.begin_turn(session_id, user_message("two"), OWNER, 30)
    await append_message(store, second.id, answer)
    await append_partial_text(store, second.id, 2, 0, "half")
    await _turn(store)  # another session's turn is not read

    loaded = await store.turns_with_messages(session_id)
    assert [
        (turn.id, [(s.seq, s.message, s.partial) for s in stored]) for turn, stored in loaded
    ] == [
        (first, [(1, answer, False)]),
        (
            second.id,
            [
                (1, answer, False),
                (2, assistant_message([TextBlock(text="half", partial=True)]), True),
            ],
        ),
    ]
    assert [turn for turn, _ in loaded] == await store.turns(session_id)
    for turn, stored in loaded:
        expected = await store.turn_messages(turn.id)
        assert [(s.turn_id, s.seq, s.message, s.partial) for s in stored] == [
            (s.turn_id, s.seq, s.message, s.partial) for s in expected
        ]
    assert await store.turns_with_messages("missing") == []


async def test_a_transcript_is_what_the_reads_it_stands_for_give(store: Store) -> None:
    session_id, first = await _turn(store)
    await append_message(store, first, assistant_message([TextBlock(text="one")]))
    await end_turn(store, first, "completed")
    second = await store.begin_turn(session_id, user_message("two"), OWNER, 30)
    await upsert_tool_call(store, second.id, "a", call_index=0, name="bash", state="running")
    await append_event(
        store,
        session_id,
        second.id,
        {"type": "usage", "usage": Usage(input_tokens=5, output_tokens=2).to_dict()}
        | {"total_input": 5, "total_output": 2},
    )
    await append_partial_text(store, second.id, 2, 0, "half", seq=40, last_seq=41, marks=())
    queued, _, _ = await store.enqueue_message(session_id, "later")
    await _turn(store)  # another session's is not read

    read = await store.transcript(session_id)
    assert read is not None
    assert read.session == await store.get_session(session_id)
    # (a partial message rebuilt from text says when it was read)
    assert [(t, [(m.seq, m.message, m.partial) for m in ms]) for t, ms in read.turns] == [
        (t, [(m.seq, m.message, m.partial) for m in ms])
        for t, ms in await store.turns_with_messages(session_id)
    ]
    assert read.tool_calls == await store.tool_calls(session_id=session_id)
    assert read.queued == [queued] == await store.queued_messages(session_id)
    assert read.last_seq == await store.last_event_seq(session_id) == 41
    assert read.running_usage == {second.id: await store.running_usage(session_id, second.id)}
    assert await store.transcript("missing") is None


async def test_tool_calls_upsert_and_order(store: Store) -> None:
    session_id, turn_id = await _turn(store)
    await upsert_tool_call(
        store, turn_id, "b", call_index=1, name="grep", state="input-streaming", step=1
    )
    await upsert_tool_call(
        store, turn_id, "a", call_index=0, name="bash", state="input-streaming", step=1
    )
    await upsert_tool_call(
        store,
        turn_id,
        "a",
        call_index=0,
        name="bash",
        state="input-available",
        input={"command": "ls"},
    )
    await upsert_tool_call(store, turn_id, "a", call_index=0, name="bash", state="running")
    await upsert_tool_call(
        store,
        turn_id,
        "a",
        call_index=0,
        name="bash",
        state="output-error",
        output="exit 1",
        is_error=True,
    )
    # A terminal state sticks: a late write cannot reopen the call.
    await upsert_tool_call(store, turn_id, "a", call_index=0, name="bash", state="running")
    await upsert_tool_call(
        store,
        turn_id,
        "c",
        call_index=0,
        name="read_file",
        state="running",
        read_only=True,
        step=2,
        input={"path": "x"},
    )
    calls = await store.tool_calls(turn_id)
    assert [c.call_id for c in calls] == ["a", "b", "c"]
    a = calls[0]
    assert (a.state, a.input, a.output, a.is_error, a.step) == (
        "output-error",
        {"command": "ls"},
        "exit 1",
        True,
        1,
    )
    assert calls[2].read_only
    assert calls[2].step == 2
    _, other_turn = await _turn(store)
    await upsert_tool_call(store, other_turn, "z", call_index=0, name="bash", state="running")
    assert [c.call_id for c in await store.tool_calls(session_id=session_id)] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="exactly one"):
        await store.tool_calls()
    with pytest.raises(StoreError):
        await upsert_tool_call(store, "missing", "x", call_index=0, name="n", state="running")


# -- the event log ---------------------------------------------------------------------------


async def test_event_log_append_and_replay(store: Store) -> None:
    session_id, turn_id = await _turn(store)
    other, _ = await _turn(store)
    payloads = [{"type": "step_started", "step": i} for i in range(1, 6)]
    seqs = [await append_event(store, session_id, turn_id, p) for p in payloads]
    assert seqs == [1, 2, 3, 4, 5]
    assert await append_event(store, other, None, {"type": "usage"}) == 1
    events = await store.events_after(session_id)
    assert [(e.seq, e.turn_id, e.type, e.payload) for e in events] == [
        (i + 1, turn_id, "step_started", p) for i, p in enumerate(payloads)
    ]
    assert [e.seq for e in await store.events_after(session_id, 3)] == [4, 5]
    assert [e.seq for e in await store.events_after(session_id, 1, limit=2)] == [2, 3]
    assert await store.events_after(session_id, 5) == []
    with pytest.raises(StoreError):
        await append_event(store, "missing", None, {"type": "x"})


async def test_contiguous_seqs_under_concurrent_appends(store: Store) -> None:
    session_id, turn_id = await _turn(store)

    async def writer(name: str) -> None:
        for i in range(50):
            await append_event(store, session_id, turn_id, {"type": "tick", "who": name, "i": i})
            await append_partial_text(store, turn_id, 1, 0, f"{name}{i} ")

    await asyncio.gather(writer("a"), writer("b"))
    events = await store.events_after(session_id)
    assert [e.seq for e in events] == list(range(1, 201))
    for who in "ab":
        ticks = [e.payload["i"] for e in events if e.payload.get("who") == who]
        assert ticks == list(range(50))


async def test_a_started_write_completes_when_its_caller_is_cancelled(store: Store) -> None:
    session_id, turn_id = await _turn(store)
    task = asyncio.create_task(append_event(store, session_id, turn_id, {"type": "kept"}))
    await asyncio.sleep(0)  # one step: the write is handed to the store (or made at once)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert [e.type for e in await store.events_after(session_id)] == ["kept"]


# -- lifecycle -------------------------------------------------------------------------------


async def test_lifecycle(make_store: StoreFactory) -> None:
    store = make_store()
    with pytest.raises(StoreError, match="not open"):
        await store.list_sessions()
    await store.open()
    await store.open()  # idempotent
    session = await store.create_session(workdir="/w", model="m")
    await store.close()
    await store.close()
    with pytest.raises(StoreError, match="not open"):
        await store.get_session(session.id)
    async with make_store() as again:
        assert await again.get_session(session.id) == session
