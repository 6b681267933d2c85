"""Leaving a stream stops its turn: a reader that breaks off after any event of a tool turn
leaves it recorded, the session free and resumable at once, and no further model call made.

An async generator left by ``break`` stays suspended until it is collected, and its turn goes
on (another model call, a complete answer stored, the session busy, ``resume`` saying there is
nothing to resume while the transcript shows pending work). ``run_stream`` is a context manager
so that leaving its block ends the turn there.
"""

from __future__ import annotations

from pathlib import Path

from drover import Agent, Event, ToolContext, tool
from drover.config.settings import Config
from drover.core.events import TERMINAL_TOOL_STATES, is_terminal
from drover.testing.scripted import Reply, ScriptedProvider, call, request_problems

NOTES: list[str] = []


@tool
async def note(ctx: ToolContext, text: str) -> str:
    """Write a note down.

    Args:
        text: What to note.
    """
    NOTES.append(text)
    return f"noted {text!r}"


def _script() -> list[Reply]:
    return [
        Reply(text="Let me write two notes.", chunk=5, calls=[call("note", text="a")]),
        Reply(text="One more.", chunk=5, calls=[call("note", text="b")]),
        Reply(text="Both notes are written.", chunk=5),
        *(Reply(text=f"Carrying on ({n}).") for n in range(6)),
    ]


def _agent(provider: ScriptedProvider, tmp_path: Path) -> Agent:
    return Agent(
        provider,
        tools=[note],
        store=str(tmp_path / "journal.db"),
        workdir=tmp_path,
        permission_mode="allow",
        config=Config(),
    )


async def _whole_turn(tmp_path: Path) -> list[Event]:
    events: list[Event] = []
    async with (
        _agent(ScriptedProvider(_script()), tmp_path) as agent,
        agent.run_stream("write the notes") as stream,
    ):
        async for event in stream:
            events.append(event)
    assert stream.result.status == "completed"
    return events


async def test_breaking_after_any_event_stops_the_turn_and_leaves_it_resumable(
    tmp_path: Path,
) -> None:
    whole = tmp_path / "whole"
    whole.mkdir()
    events = await _whole_turn(whole)
    assert is_terminal(events[-1])
    assert len(events) > 30  # every kind of event of a two-call turn, deltas included
    for cut in range(1, len(events) + 1):
        where = tmp_path / f"cut-{cut}"
        where.mkdir()
        await _break_after(cut, where)


async def _break_after(cut: int, tmp_path: Path) -> None:
    provider = ScriptedProvider(_script())
    seen: list[Event] = []
    requests_at_break = -1
    async with _agent(provider, tmp_path) as agent:
        session = await agent.session()
        async with session.run_stream("write the notes") as stream:
            async for event in stream:
                seen.append(event)
                if len(seen) == cut:
                    requests_at_break = len(provider.requests)
                    break
        # Left: the turn is over and recorded, the session free, no model call since.
        assert session.running is None, cut
        assert len(provider.requests) == requests_at_break, cut
        turn = await agent.store.last_turn(session.id)
        assert turn is not None
        ended = is_terminal(seen[-1])
        # Events reach a reader after the loop made them: the turn may have finished already
        # (its last model call was the one before the break), else it was interrupted.
        assert turn.status in (("completed",) if ended else ("interrupted", "completed")), cut
        assert stream.result.status == turn.status, cut
        calls = await agent.store.tool_calls(turn.id)
        assert all(c.state in TERMINAL_TOOL_STATES for c in calls), cut
        # What the session holds is what the journal holds, and the next request is valid.
        async with _agent(ScriptedProvider([]), tmp_path) as reader:
            stored = await reader.session(session.id)
            assert stored.pending == session.pending, cut
            assert stored.history == session.history, cut
        problems = request_problems([*session.history])
        assert problems == {"anthropic": [], "openai": [], "openai-responses": []}, cut
        # Resumable at once, and the session takes the next message.
        if session.pending:
            resumed = await session.resume()
            assert resumed.status == "completed", cut
        else:
            assert turn.status == "completed", cut
        again = await session.run("and now?")
        assert again.status == "completed", cut
