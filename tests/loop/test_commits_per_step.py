"""What a tool step costs the journal in SQLite commits, and that nothing is shown before it
is durable.

A tool step commits three times: the call's first state with the eager flush of the text
before it; the assistant message with the call's ``running`` (the step's ``usage`` and
``input-available`` ride along); the call's end with the step's results message. The counts
are real ``COMMIT`` statements of write transactions on a real SQLite file, traced on the
store's own connection, through the real Runner and loop. The journal's flush timer is set
far off so a slow machine cannot add a timed flush: the count is exact.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from drover.core.conversation import ConversationManager
from drover.core.events import AssistantMessage, Event, ToolStateChanged
from drover.journal.journal import Journal
from drover.runtime import runner as runner_module
from drover.runtime.runner import Runner
from drover.store.sqlite.store import SqliteStore
from drover.testing.scripted import Reply, ScriptedProvider, call
from drover.tools.base import ToolContext
from drover.tools.decorator import tool
from drover.tools.registry import ToolRegistry
from drover.turn.loop import LoopSettings
from drover.turn.permissions import PermissionPolicy

_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class WriteCommits:
    """Counts committed write transactions on every SQLite connection opened while active:
    a ``COMMIT`` that ends a ``BEGIN IMMEDIATE``, or a write statement in autocommit mode."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def watch(self, conn: sqlite3.Connection) -> None:
        state = {"write_tx": False, "in_tx": False}

        def trace(statement: str) -> None:
            head = statement.lstrip().upper()
            with self._lock:
                if head.startswith("BEGIN"):
                    state["in_tx"] = True
                    state["write_tx"] = "IMMEDIATE" in head or "EXCLUSIVE" in head
                elif head.startswith(("COMMIT", "END")):
                    self.count += state["write_tx"]
                    state["in_tx"] = state["write_tx"] = False
                elif head.startswith("ROLLBACK") and " TO " not in head:
                    state["in_tx"] = state["write_tx"] = False
                elif head.startswith(_WRITES):
                    if state["in_tx"]:
                        state["write_tx"] = True
                    else:
                        self.count += 1

        conn.set_trace_callback(trace)


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch) -> WriteCommits:
    counter = WriteCommits()
    original = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = original(*args, **kwargs)
        counter.watch(conn)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    # No timed flush: the steps' deferred rows go with the next write a guarantee needs.
    monkeypatch.setattr(runner_module, "Journal", functools.partial(Journal, flush_interval=3600))
    return counter


def make_tools() -> ToolRegistry:
    @tool(read_only=True)
    async def look(ctx: ToolContext, key: str) -> str:
        """Read a value."""
        return f"{key} is empty"

    @tool
    async def note(ctx: ToolContext, key: str, value: str) -> str:
        """Write a value."""
        return f"noted {key}={value}"

    return ToolRegistry([look, note])


class DurableWhenShown:
    """A live consumer that checks, as each event reaches it, that the store already holds
    what the event shows: a finished assistant message, a call and its state (but
    ``input-available``, which the journal writes with the message)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.shown: list[Event] = []
        self.problems: list[str] = []

    async def send(self, event: Event) -> None:
        self.shown.append(event)
        conn = sqlite3.connect(self.path)
        try:
            if isinstance(event, AssistantMessage) and not event.partial:
                rows = conn.execute("SELECT body FROM messages").fetchall()
                if not any(event.message.text and event.message.text in str(r) for r in rows):
                    self.problems.append(f"shown before stored: {event.message.text!r}")
            elif isinstance(event, ToolStateChanged):
                row = conn.execute(
                    "SELECT state FROM tool_calls WHERE call_id = ?", (event.call_id,)
                ).fetchone()
                # input-available is not promised at once (it goes with the message).
                deferred = event.state == "input-available"
                if row is None or (row[0] != event.state and not deferred):
                    self.problems.append(f"{event.call_id} shown {event.state}, stored {row}")
        finally:
            conn.close()


async def run_turn(
    path: Path, tool_name: str, steps: int, live: list[Any] | None = None
) -> tuple[SqliteStore, str]:
    store = SqliteStore(path)
    await store.open()
    record = await store.create_session(workdir=str(path.parent), model="scripted:m")
    args = {"key": "k"} if tool_name == "look" else {"key": "k", "value": "v"}
    script = [
        Reply(text=f"Step {i}: working on it.", calls=[call(tool_name, **args)], chunk=6)
        for i in range(steps)
    ]
    script.append(Reply(text="All done.", chunk=6))
    runner = Runner(store, lease_seconds=3600)  # no lease renewal within the test
    session = await runner.agent_session(
        record,
        provider=ScriptedProvider(script),
        tools=make_tools(),
        workdir=path.parent,
        policy=PermissionPolicy("allow"),
        settings=LoopSettings(compaction=False, max_turns=steps + 1),
        convo=ConversationManager(system_prompt="test"),
    )
    outcome = await runner.run(session, "go", live or [])
    assert outcome.event.type == "done", outcome.event
    return store, record.id


@pytest.mark.parametrize("tool_name", ["look", "note"])
async def test_a_tool_step_commits_three_times(
    tmp_path: Path, commits: WriteCommits, tool_name: str
) -> None:
    """Read-only or side-effecting: the difference between 2 and 6 steps is 3 commits a step."""
    totals = {}
    for steps in (2, 6):
        before = commits.count
        store, _ = await run_turn(tmp_path / f"{tool_name}{steps}.db", tool_name, steps)
        totals[steps] = commits.count - before
        await store.close()
    assert (totals[6] - totals[2]) / 4 == 3, totals


async def test_nothing_is_shown_before_it_is_durable(tmp_path: Path) -> None:
    """The assistant message rides with the call's ``running``; a printer sees it only then."""
    path = tmp_path / "shown.db"
    printer = DurableWhenShown(path)
    store, _ = await run_turn(path, "note", 3, live=[printer])
    await store.close()
    assert printer.problems == []
    messages = [e for e in printer.shown if isinstance(e, AssistantMessage)]
    assert len(messages) == 4
    shown = [e.type for e in printer.shown]
    # Held back, then shown in order, before the state that made it durable.
    first = shown.index("assistant_message")
    assert shown[first + 1] == "tool_state"
