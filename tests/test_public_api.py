"""The public API: the exact export list of ``drover``, and :class:`drover.Agent` end to end
with the scripted provider, a real journal and (once) the fake server through the real SDK."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import types
from pathlib import Path

import pytest

import drover
from drover import Agent, DroverError, Event, PermissionRequest, TextDelta, ToolContext, tool
from drover.config.settings import Config
from drover.store import SqliteStore
from drover.testing.scripted import Reply, ScriptedProvider, call
from drover.testing.server import FakeLLMServer

EXPORTS = [
    "Agent",
    "AssistantMessage",
    "ConfigError",
    "ContentBlock",
    "Decision",
    "Done",
    "DroverError",
    "EndReason",
    "Error",
    "Event",
    "Incomplete",
    "Message",
    "PermissionCallback",
    "PermissionRequest",
    "ProviderError",
    "RunResult",
    "Session",
    "SessionBusyError",
    "StoreError",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "Tool",
    "ToolContext",
    "ToolDone",
    "ToolError",
    "ToolOutput",
    "ToolProgress",
    "ToolResultBlock",
    "ToolStart",
    "ToolStateChanged",
    "ToolUseBlock",
    "TurnStarted",
    "TurnStatus",
    "TurnStream",
    "Usage",
    "event_to_dict",
    "tool",
]


def test_the_export_list_is_exact() -> None:
    assert drover.__all__ == EXPORTS
    for name in EXPORTS:
        assert getattr(drover, name) is not None
    public = {
        name
        for name in dir(drover)
        if not name.startswith("_") and not isinstance(getattr(drover, name), types.ModuleType)
    }
    assert public == set(EXPORTS)
    with pytest.raises(AttributeError):
        _ = drover.NotExported  # type: ignore[attr-defined]


def test_import_drover_loads_nothing_until_used() -> None:
    """Every command imports the package: it must not pay for the library (or pydantic)."""
    code = (
        "import sys, drover\n"
        "print(sorted(m for m in sys.modules if m.startswith(('drover.', 'pydantic'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@tool
async def note(ctx: ToolContext, filename: str, text: str) -> str:
    """Write a note into the working directory.

    Args:
        filename: The note's file name.
        text: What the note says.
    """
    (ctx.workdir / filename).write_text(text, encoding="utf-8")
    return f"wrote {filename}"


SYSTEM = "You keep notes for the user."


def agent_for(provider: ScriptedProvider, workdir: Path, **kwargs: object) -> Agent:
    return Agent(
        provider,
        tools=[note],
        system_prompt=SYSTEM,
        store=":memory:",
        workdir=workdir,
        config=Config(),
        **kwargs,  # type: ignore[arg-type]
    )


async def test_run_uses_the_tools_and_keeps_the_session(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [
            Reply(text="Writing it.", calls=[call("note", filename="a.txt", text="milk")]),
            Reply(text="Noted."),
            Reply(text="It says milk."),
        ]
    )
    async with agent_for(provider, tmp_path, permission_mode="allow") as agent:
        first = await agent.run("note: milk")
        assert (first.status, first.text, first.pending) == ("completed", "Noted.", ())
        assert first.completed
        assert first.usage.input_tokens > 0
        assert (tmp_path / "a.txt").read_text() == "milk"
        second = await agent.run("what did I note?", session=first.session_id)
        assert second.session_id == first.session_id
        assert second.text == "It says milk."
        turns = await agent.store.turns(first.session_id)
    assert [t.status for t in turns] == ["completed", "completed"]
    assert provider.requests[0].system == SYSTEM
    assert [t.name for t in provider.requests[0].tools] == ["note"]
    # The second turn's request carries the first turn's whole exchange.
    assert len(provider.requests[2].messages) == 5


@pytest.mark.parametrize(("answer", "written"), [("allow", True), ("deny", False), (None, False)])
async def test_permission_requests_go_to_the_callback(
    tmp_path: Path, answer: str | None, written: bool
) -> None:
    asked: list[str] = []

    async def decide(request: PermissionRequest) -> str:
        asked.append(request.tool_name)
        return str(answer)

    provider = ScriptedProvider(
        [Reply(calls=[call("note", filename="b.txt", text="x")]), Reply(text="ok")]
    )
    callback = decide if answer is not None else None
    async with agent_for(provider, tmp_path, on_permission=callback) as agent:
        result = await agent.run("note x")
    assert result.status == "completed"
    assert (tmp_path / "b.txt").exists() is written
    assert asked == (["note"] if callback else [])


async def test_an_incomplete_turn_is_pending_and_resumed(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [
            Reply(text="Half an ans", fail_after=3, fail_retryable=False),
            Reply(text="The whole answer."),
        ]
    )
    async with agent_for(provider, tmp_path) as agent:
        cut = await agent.run("answer")
        assert cut.status == "incomplete"
        assert cut.reason == "error"
        assert cut.pending and cut.pending[-1].role == "assistant"
        resumed = await agent.resume(cut.session_id)
    assert (resumed.status, resumed.text, resumed.pending) == ("completed", "The whole answer.", ())
    assert provider.requests[-1].messages[1].text.startswith("Half")


async def test_leaving_run_stream_mid_turn_leaves_a_resumable_session(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [Reply(text="A long answer that stalls", chunk=4, stall_after=4), Reply(text="Done now.")]
    )
    async with agent_for(provider, tmp_path) as agent:
        seen = []
        async with agent.run_stream("talk") as stream:
            async for event in stream:
                seen.append(event)
                if isinstance(event, TextDelta):
                    break
        # The block is left: the turn is over and recorded, the session free at once.
        session_id = stream.session_id
        (turn,) = await agent.store.turns(session_id)
        assert turn.status == "interrupted"
        assert stream.result.status == "interrupted"
        session = await agent.session(session_id)
        assert session.pending
        types_seen = []
        async with agent.run_stream(None, session=session_id) as again:
            async for event in again:
                types_seen.append(event.type)
    assert types_seen[0] == "turn_started"
    assert types_seen[-1] == "done"
    assert again.result.text == "Done now."
    # The resumed request carries the text streamed before the reader left.
    assert provider.requests[-1].messages[1].text.startswith("A lo")


def test_run_sync_continues_a_session_across_event_loops(tmp_path: Path) -> None:
    provider = ScriptedProvider([Reply(text="one"), Reply(text="two")])
    db = tmp_path / "journal.db"
    agent = Agent(provider, tools=[], store=str(db), workdir=tmp_path, config=Config())
    first = agent.run_sync("1")
    second = agent.run_sync("2", session=first.session_id)
    assert (first.text, second.text) == ("one", "two")
    assert [m.text for m in provider.requests[1].messages] == ["1", "one", "2"]
    assert db.exists()


def test_a_store_given_as_a_path_is_that_file(tmp_path: Path) -> None:
    db = tmp_path / "as a path.db"
    agent = Agent(ScriptedProvider([Reply(text="kept")]), tools=[], store=db, workdir=tmp_path)
    result = agent.run_sync("keep this")
    assert result.text == "kept"
    with sqlite3.connect(db) as conn:
        (turns,) = conn.execute("SELECT COUNT(*) FROM turns").fetchone()
    conn.close()
    assert turns == 1


def _system_of(body: dict[str, object]) -> object:
    if "instructions" in body:  # Responses
        return body["instructions"]
    if "system" in body:  # Anthropic Messages
        return body["system"]
    first = body["messages"][0]  # type: ignore[index]
    return first["content"] if first["role"] == "system" else None


@pytest.mark.parametrize("provider", ["anthropic", "openai", "openai-responses"])
async def test_a_model_string_reaches_the_real_sdk_with_the_system_prompt(
    tmp_path: Path, fake_llm: FakeLLMServer, provider: str
) -> None:
    fake_llm.script({"text": "hello"})
    base_url = fake_llm.base_url if provider == "anthropic" else fake_llm.openai_base_url
    agent = Agent(
        f"{provider}:model-test",
        tools=[note],
        system_prompt=SYSTEM,
        store=str(tmp_path / "j.db"),
        workdir=tmp_path,
        base_url=base_url,
        config=Config(),
    )
    async with agent:
        result = await agent.run("hi")
    assert (result.status, result.text) == ("completed", "hello")
    (request,) = fake_llm.requests
    assert _system_of(request.body) in (SYSTEM, [{"type": "text", "text": SYSTEM}])
    assert "note" in json.dumps(request.body["tools"])


async def test_the_default_store_and_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "env.db"
    monkeypatch.setenv("DROVER_DB", str(db))
    provider = ScriptedProvider([Reply(text="hi")])
    async with Agent(provider, workdir=tmp_path, config=Config()) as agent:
        assert isinstance(agent.store, SqliteStore)
        result = await agent.run("hello")
    assert result.completed
    assert db.exists()
    names = {t.name for t in provider.requests[0].tools}
    assert {"read_file", "write_file", "edit_file", "bash", "glob", "grep", "task"} <= names
    assert str(tmp_path) in provider.requests[0].system


async def test_a_stream_is_read_inside_its_block(tmp_path: Path) -> None:
    """Iterating ``run_stream`` outside ``async with`` would leave the turn running behind a
    reader that breaks off: it is refused with the way to write it."""
    agent = Agent(ScriptedProvider([]), tools=[], store=":memory:", workdir=tmp_path)
    with pytest.raises(DroverError, match=r"async with agent\.run_stream"):
        async for _event in agent.run_stream("talk"):
            pass
    await agent.aclose()


async def test_closing_the_agent_ends_a_turn_still_running(tmp_path: Path) -> None:
    db = str(tmp_path / "journal.db")
    provider = ScriptedProvider([Reply(text="Stalling here", chunk=4, stall_after=3)])
    agent = Agent(provider, tools=[], store=db, workdir=tmp_path, config=Config())
    session = await agent.session()
    seen = asyncio.Event()

    class Sees:
        async def send(self, event: Event) -> None:
            if isinstance(event, TextDelta):
                seen.set()

    running = session.start("talk", live=[Sees()])
    await asyncio.wait_for(seen.wait(), timeout=10)
    await agent.aclose()
    assert running.task is not None and running.task.done()
    async with Agent(provider, tools=[], store=db, workdir=tmp_path, config=Config()) as again:
        (record,) = await again.store.list_sessions()
        (turn,) = await again.store.turns(record.id)
    assert turn.status == "interrupted"


async def test_run_sync_inside_an_event_loop_says_to_await(tmp_path: Path) -> None:
    agent = Agent(ScriptedProvider([]), tools=[], store=":memory:", workdir=tmp_path)
    with pytest.raises(DroverError, match=r"await agent\.run"):
        agent.run_sync("hi")
