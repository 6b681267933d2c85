"""A process killed with SIGKILL mid-turn: what a new process finds and recovers."""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
import sys
from pathlib import Path

from drover.core.events import MAY_HAVE_RUN_TEXT
from drover.journal.history import build_history
from drover.journal.numbering import RESERVE_BLOCK
from drover.store.sqlite.store import SqliteStore

_CHILD = """
import asyncio, os, socket, sys
from drover.core.events import (AssistantMessage, StepStarted, TextDelta, ToolStateChanged,
                           TurnStarted)
from drover.core.messages import TextBlock, ToolUseBlock, assistant_message, user_message
from drover.journal.journal import Journal
from drover.store.sqlite.store import SqliteStore

def owner():
    with open(f"/proc/{os.getpid()}/stat") as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    return f"{socket.gethostname()}:{os.getpid()}:{start}"

async def main():
    store = SqliteStore(sys.argv[1])
    await store.open()
    session = await store.create_session(session_id="s", workdir="/w", model="m")
    prompt = user_message("clean up the build directory")
    turn = await store.begin_turn(session.id, prompt, owner(), 3600)
    journal = Journal(store, session.id)
    await journal.send(TurnStarted(turn_id=turn.id, session_id="s", user_message=prompt))
    await journal.send(StepStarted(step=1))
    text = "I will delete the stale files now. " * 40
    for i in range(0, len(text), 7):
        await journal.send(TextDelta(text=text[i : i + 7]))
    call = ToolUseBlock(id="rm", name="bash", input={"command": "rm -rf build"})
    await journal.send(ToolStateChanged(call_id="rm", call_index=0, name="bash",
                                        state="input-available", input=call.input))
    await journal.send(AssistantMessage(message=assistant_message([TextBlock(text=text), call])))
    await journal.send(ToolStateChanged(call_id="rm", call_index=0, name="bash", state="running"))
    print("running", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_killed_turn_is_recovered_with_a_valid_history(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CHILD, str(path), stdout=subprocess.PIPE
    )
    assert child.stdout is not None
    assert await asyncio.wait_for(child.stdout.readline(), timeout=20) == b"running\n"
    child.send_signal(signal.SIGKILL)
    await child.wait()

    async with SqliteStore(path) as store:
        # The lease has an hour to run, but its owner is dead.
        (turn_id,) = await store.recover_orphans()
        (turn,) = await store.turns("s")
        assert turn.status == "interrupted"
        (call,) = await store.tool_calls(turn_id)
        assert call.state == "interrupted"
        assert call.outcome_unknown
        stored = await store.turn_messages(turn_id)
        history = build_history([(turn, stored)], await store.tool_calls(session_id="s"))
        events = await store.events_after("s")
    assert [m.role for m in history] == ["user", "assistant", "user"]
    assert history[1].tool_uses[0].id == "rm"
    assert history[2].tool_results[0].content == MAY_HAVE_RUN_TEXT
    assert history[2].tool_results[0].is_error
    # The live rows cover the numbers 1, 2, 3… without a gap (a coalesced text row covers its
    # deltas'); recovery numbers its two events after the block the dead journal reserved.
    live, recovered = events[:-2], events[-2:]
    assert live[0].seq == 1
    assert all(b.seq == a.end_seq + 1 for a, b in itertools.pairwise(live))
    assert [e.seq for e in recovered] == [RESERVE_BLOCK + 1, RESERVE_BLOCK + 2]
    assert events[-1].type == "incomplete"
