"""Interrupting a turn: during the stream, a tool's run and a permission wait.

Each case checks the terminal event, that the work is pending, that no task is left behind, and
that the next request sent to the API is valid (the fake server rejects invalid histories).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from drover.core.events import Event, Incomplete, PermissionRequest, TextDelta, ToolStart
from drover.providers.base import Provider
from drover.testing.server import FakeLLMServer
from drover.turn.permissions import PermissionPolicy
from drover.turn.state import AgentSession

from .conftest import Waiting, new_session


def _other_tasks() -> set[asyncio.Task[object]]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current}


async def _interrupt_when(session: AgentSession, prompt: str, sink: Waiting) -> None:
    before = _other_tasks()
    turn = asyncio.create_task(session.run(prompt, sink))
    await asyncio.wait_for(sink.seen.wait(), timeout=20)
    turn.cancel()
    try:
        await asyncio.wait_for(turn, timeout=20)
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the turn was not interrupted")
    leaked = {t for t in _other_tasks() - before if not t.done()}
    assert not leaked, f"tasks left behind: {leaked}"


def _terminal(events: list[Event]) -> Event:
    return events[-1]


async def test_interrupt_during_stream_keeps_partial_text(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"text": "Thinking about it at some length", "stall_after": 5}, {"text": "ok"})
    session = new_session(provider, tmp_path)
    sink = Waiting(lambda e: isinstance(e, TextDelta))
    await _interrupt_when(session, "go", sink)

    end = _terminal(sink.events)
    assert isinstance(end, Incomplete) and end.reason == "interrupted"
    assert session.pending[-1].role == "assistant"
    assert session.pending[-1].content[0].partial  # type: ignore[union-attr]

    outcome = await session.run("carry on", Waiting(lambda e: False))
    assert outcome.event.type == "done"


async def test_interrupt_while_permission_prompt_waits(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {"tool_calls": [{"name": "write_file", "input": {"path": "x", "content": "x"}}]},
        {"text": "ok"},
    )
    session = new_session(provider, tmp_path, policy=PermissionPolicy("ask"))
    sink = Waiting(lambda e: isinstance(e, PermissionRequest))  # never answered
    await _interrupt_when(session, "write", sink)

    end = _terminal(sink.events)
    assert isinstance(end, Incomplete) and end.reason == "interrupted"
    result = session.pending[-1].tool_results[0]
    assert result.is_error and "before it ran" in result.content
    assert not (tmp_path / "x").exists()
    states = [e.state for e in sink.events if e.type == "tool_state"]  # type: ignore[union-attr]
    assert states[-1] == "interrupted"

    outcome = await session.run("never mind", Waiting(lambda e: False))
    assert outcome.event.type == "done"


async def test_interrupt_during_bash_kills_process_group_and_keeps_output(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    pid_file = tmp_path / "child.pid"
    command = "echo started; sleep 60 & echo $! > child.pid; wait"
    fake_llm.script(
        {"tool_calls": [{"name": "bash", "input": {"command": command}}]}, {"text": "ok"}
    )
    session = new_session(provider, tmp_path)
    sink = Waiting(lambda e: isinstance(e, ToolStart))
    turn = asyncio.create_task(session.run("run it", sink))
    await asyncio.wait_for(sink.seen.wait(), timeout=20)
    # Wait (bounded) for the observable effect: the background child wrote its pid.
    deadline = asyncio.get_running_loop().time() + 20
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert asyncio.get_running_loop().time() < deadline, "bash never started its child"
        await asyncio.sleep(0.01)
    child = int(pid_file.read_text())
    turn.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(turn, timeout=20)

    # The process group was killed; on a loaded machine the kernel may take a moment.
    deadline = asyncio.get_running_loop().time() + 10
    while _alive(child) and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    assert not _alive(child), "the background child of bash survived the interruption"
    end = _terminal(sink.events)
    assert isinstance(end, Incomplete) and end.reason == "interrupted"
    result = session.pending[-1].tool_results[0]
    assert result.is_error
    assert "may have had effects" in result.content
    assert "started" in result.content and "cut off" in result.content
    state = [e for e in sink.events if e.type == "tool_state"][-1]
    assert state.outcome_unknown  # type: ignore[union-attr]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
