"""Orphan recovery: turns left ``running`` by a dead process, never those of a live one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
from support.writes import append_message, append_partial_text, upsert_tool_call

from drover.core.events import MAY_HAVE_RUN_TEXT, NOT_RUN_TEXT, READ_ONLY_CUT_TEXT
from drover.core.messages import TextBlock, ToolUseBlock, assistant_message, user_message
from drover.journal.history import build_history
from drover.journal.owners import owner_alive
from drover.journal.protocol import Store
from drover.journal.rules import ORPHAN_ERROR

from .conftest import StoreFactory
from .helpers import FakeClock

HOST = socket.gethostname()


def _start_ticks(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()[19]


def this_process() -> str:
    return f"{HOST}:{os.getpid()}:{_start_ticks(os.getpid())}"


def dead_process() -> str:
    """The owner id of a process that ran on this host and exited (and was reaped)."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    owner = f"{HOST}:{child.pid}:{_start_ticks(child.pid)}"
    child.communicate(b"")
    return owner


def test_owner_alive() -> None:
    assert owner_alive(this_process())
    assert not owner_alive(dead_process())
    # The same pid started at another time: the pid was reused, the owner is gone.
    assert not owner_alive(f"{HOST}:{os.getpid()}:1")
    # Another host: only its lease can tell.
    assert owner_alive("some-other-host:1:1")
    assert owner_alive("not an owner id")


def test_a_killed_unreaped_process_is_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    owner = f"{HOST}:{child.pid}:{_start_ticks(child.pid)}"
    try:
        assert owner_alive(owner)
        child.send_signal(signal.SIGKILL)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # a zombie until reaped
        assert not owner_alive(owner)
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_000_000.0)


@pytest.fixture
async def timed_store(make_store: StoreFactory, clock: FakeClock) -> AsyncIterator[Store]:
    async with make_store(clock=clock) as store:
        yield store


async def _running_turn(store: Store, owner: str, lease: float = 30) -> tuple[str, str]:
    session = await store.create_session(workdir="/w", model="m")
    turn = await store.begin_turn(session.id, user_message("go"), owner, lease)
    return session.id, turn.id


async def test_which_turns_are_recovered(timed_store: Store, clock: FakeClock) -> None:
    _, dead = await _running_turn(timed_store, dead_process())
    _, alive = await _running_turn(timed_store, this_process())
    _, remote = await _running_turn(timed_store, "other-host:5:5")
    _, remote_short = await _running_turn(timed_store, "other-host:6:6", lease=5)
    _, alive_short = await _running_turn(timed_store, this_process(), lease=5)
    clock.advance(10)
    recovered = await timed_store.recover_orphans()
    assert set(recovered) == {dead, remote_short, alive_short}
    # Only live turns with a valid lease are left running; a second pass finds nothing.
    assert await timed_store.recover_orphans() == []
    clock.advance(100)
    assert set(await timed_store.recover_orphans()) == {alive, remote}


async def test_recovery_scoped_to_a_session_leaves_the_others(timed_store: Store) -> None:
    """A turn start recovers its own session's orphan only: another session's dead turn is
    left for its takeover, which resumes it (a bystander must not end it)."""
    mine, my_turn = await _running_turn(timed_store, dead_process())
    _, other_turn = await _running_turn(timed_store, dead_process())
    assert await timed_store.recover_orphans(session_id=mine) == [my_turn]
    statuses = {
        t.id: t.status
        for s in await timed_store.list_sessions()
        for t in await timed_store.turns(s.id)
    }
    assert statuses == {my_turn: "interrupted", other_turn: "running"}
    assert await timed_store.recover_orphans() == [other_turn]


async def test_is_alive_can_be_injected(timed_store: Store) -> None:
    _, a = await _running_turn(timed_store, "x:1:1")
    _, b = await _running_turn(timed_store, "y:1:1")
    assert await timed_store.recover_orphans(lambda owner: owner != "x:1:1") == [a]
    assert await timed_store.recover_orphans(lambda owner: True) == []
    assert b


async def test_a_renewed_lease_keeps_the_turn(timed_store: Store, clock: FakeClock) -> None:
    owner = "other-host:1:1"
    _, turn = await _running_turn(timed_store, owner, lease=30)
    for _ in range(5):
        clock.advance(20)
        assert await timed_store.renew_lease(turn, owner, 30)
        assert await timed_store.recover_orphans() == []


async def test_recovery_repairs_the_turn(timed_store: Store) -> None:
    session_id, turn_id = await _running_turn(timed_store, dead_process())
    uses = [
        ToolUseBlock(id="w", name="write_file", input={"path": "a"}),
        ToolUseBlock(id="r", name="read_file", input={"path": "b"}),
        ToolUseBlock(id="q", name="bash", input={"command": "x"}),
        ToolUseBlock(id="d", name="bash", input={"command": "y"}),
    ]
    await append_message(
        timed_store, turn_id, assistant_message([TextBlock(text="go"), *uses]), step=1
    )
    await upsert_tool_call(
        timed_store, turn_id, "w", call_index=0, name="write_file", state="running", step=1
    )
    await upsert_tool_call(
        timed_store,
        turn_id,
        "r",
        call_index=1,
        name="read_file",
        state="running",
        read_only=True,
        step=1,
    )
    await upsert_tool_call(
        timed_store, turn_id, "q", call_index=2, name="bash", state="awaiting-permission", step=1
    )
    await upsert_tool_call(
        timed_store,
        turn_id,
        "d",
        call_index=3,
        name="bash",
        state="output-available",
        output="done",
        step=1,
    )
    # A later step had streamed some text when the process died.
    await append_partial_text(timed_store, turn_id, 2, 0, "Now I wil")

    assert await timed_store.recover_orphans() == [turn_id]

    (turn,) = await timed_store.turns(session_id)
    assert (turn.status, turn.reason, turn.error) == ("interrupted", "interrupted", ORPHAN_ERROR)
    assert turn.lease_expires_at is None
    calls = {c.call_id: c for c in await timed_store.tool_calls(turn_id)}
    assert (calls["w"].state, calls["w"].outcome_unknown, calls["w"].output) == (
        "interrupted",
        True,
        MAY_HAVE_RUN_TEXT,
    )
    assert (calls["r"].state, calls["r"].outcome_unknown, calls["r"].output) == (
        "interrupted",
        False,
        READ_ONLY_CUT_TEXT,
    )
    assert (calls["q"].outcome_unknown, calls["q"].output) == (False, NOT_RUN_TEXT)
    assert calls["d"].state == "output-available"
    stored = await timed_store.turn_messages(turn_id)
    assert [s.partial for s in stored] == [False, True]
    assert stored[1].message.content == (TextBlock(text="Now I wil", partial=True),)

    events = await timed_store.events_after(session_id)
    assert [e.type for e in events] == [
        "text_delta",
        "tool_state",
        "tool_state",
        "tool_state",
        "assistant_message",
        "incomplete",
    ]
    assert [e.seq for e in events] == list(range(1, 7))
    assert events[-1].payload["reason"] == "interrupted"

    # The history sent on resume is valid: each call has a result saying what happened.
    history = build_history([(turn, stored)], await timed_store.tool_calls(session_id=session_id))
    results = history[2].tool_results
    assert [r.tool_use_id for r in results] == ["w", "r", "q", "d"]
    assert [r.content for r in results] == [
        MAY_HAVE_RUN_TEXT,
        READ_ONLY_CUT_TEXT,
        NOT_RUN_TEXT,
        "done",
    ]
    assert [r.is_error for r in results] == [True, True, True, False]
    assert history[3].content == (TextBlock(text="Now I wil", partial=True),)


async def test_a_turn_with_no_work_ends_with_an_error_event(timed_store: Store) -> None:
    session_id, turn_id = await _running_turn(timed_store, dead_process())
    assert await timed_store.recover_orphans() == [turn_id]
    events = await timed_store.events_after(session_id)
    assert [e.type for e in events] == ["error"]
    (turn,) = await timed_store.turns(session_id)
    assert turn.status == "interrupted"
