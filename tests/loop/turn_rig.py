"""A scripted multi-step turn run through the real Runner and a real SQLite journal, and the
checks every way of ending it must pass.

The turn (in-process, deterministic): step 1 answers with text and two parallel calls — a
read-only ``look`` and a side-effecting ``note`` that asks permission; step 2's stream fails
part-way and is retried, then calls ``note`` again; step 3 fails once before its stream starts
(a provider retry) and then answers. The tools record what they started and finished, so a
check can tell a call that ran from one that never did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drover.core.conversation import ConversationManager
from drover.core.events import (
    MAY_HAVE_RUN_TEXT,
    NOT_RUN_TEXT,
    READ_ONLY_CUT_TEXT,
    Event,
    PermissionRequest,
    TerminalEvent,
)
from drover.core.messages import Message, ToolResultBlock, user_message
from drover.core.sinks import EventSink
from drover.errors import ProviderHTTPError
from drover.journal.protocol import Store
from drover.runtime.runner import Runner, load_history
from drover.store.sqlite.store import SqliteStore
from drover.testing.scripted import Reply, ScriptedProvider, call, request_problems
from drover.tools.base import ToolContext
from drover.tools.decorator import tool
from drover.tools.registry import ToolRegistry
from drover.turn.loop import LoopSettings
from drover.turn.permissions import PermissionPolicy
from drover.turn.state import AgentSession, TurnOutcome

SETTINGS = LoopSettings(stream_retry_delay=0.0, compaction=False)
#: What a call cut off while running says (it may have had effects, or was read-only).
CUT_TEXTS = (MAY_HAVE_RUN_TEXT, READ_ONLY_CUT_TEXT)


@dataclass
class Effects:
    """What the tools really did, by key."""

    started: list[str] = field(default_factory=list)
    finished: dict[str, str] = field(default_factory=dict)


def make_tools(effects: Effects) -> ToolRegistry:
    @tool(read_only=True)
    async def look(ctx: ToolContext, key: str) -> str:
        """Read a value."""
        effects.started.append(key)
        await asyncio.sleep(0)  # a point where an interruption can reach a running tool
        out = f"{key} is empty"
        effects.finished[key] = out
        return out

    @tool
    async def note(ctx: ToolContext, key: str, value: str) -> str:
        """Write a value."""
        effects.started.append(key)
        await asyncio.sleep(0)
        out = f"noted {key}={value}"
        effects.finished[key] = out
        return out

    return ToolRegistry([look, note])


def script() -> list[Reply]:
    return [
        Reply(
            text="Let me look first.",
            calls=[call("look", key="a"), call("note", key="b", value="1")],
            chunk=6,
        ),
        Reply(text="Now writing the sec", fail_after=4, chunk=6),
        Reply(text="Now writing.", calls=[call("note", key="c", value="2")], chunk=6),
        Reply(error=ProviderHTTPError(529, "Overloaded")),
        Reply(text="All done, both noted.", chunk=6),
    ]


class Allow:
    """Answers every permission request at once."""

    async def send(self, event: Event) -> None:
        if isinstance(event, PermissionRequest):
            event.decide("allow")


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def send(self, event: Event) -> None:
        self.events.append(event)


@dataclass
class Rig:
    path: Path
    store: Store
    effects: Effects
    provider: ScriptedProvider
    session_id: str = ""

    @classmethod
    async def open(cls, path: Path, store: Store | None = None) -> Rig:
        store = store or SqliteStore(path)
        await store.open()
        record = await store.create_session(workdir=str(path.parent), model="scripted:m")
        return cls(path, store, Effects(), ScriptedProvider(script()), record.id)

    async def session(self, provider: ScriptedProvider | None = None) -> AgentSession:
        runner = Runner(self.store)
        record = await self.store.get_session(self.session_id)
        assert record is not None
        return await runner.agent_session(
            record,
            provider=provider or self.provider,
            tools=make_tools(self.effects),
            workdir=self.path.parent,
            policy=PermissionPolicy("ask"),
            settings=SETTINGS,
            convo=ConversationManager(system_prompt="You are a test."),
        )

    async def run(
        self,
        live: Sequence[EventSink],
        on_task: Callable[[asyncio.Task[Any]], None] | None = None,
    ) -> tuple[AgentSession, TurnOutcome | None]:
        """Run the turn; None when it was interrupted (cancelled)."""
        session = await self.session()
        runner = Runner(self.store)
        task = asyncio.get_running_loop().create_task(
            runner.run(session, "note b and c", [Allow(), *live])
        )
        if on_task is not None:
            on_task(task)
        try:
            outcome = await asyncio.wait_for(asyncio.shield(task), timeout=30)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
            return session, None
        return session, outcome

    async def close(self) -> None:
        await self.store.close()


async def durable_history(store: Store, session_id: str) -> list[Message]:
    history = await load_history(store, session_id)
    return [*history.committed, *history.pending]


def results_by_id(messages: Sequence[Message]) -> dict[str, list[ToolResultBlock]]:
    out: dict[str, list[ToolResultBlock]] = {}
    for message in messages:
        for result in message.tool_results:
            out.setdefault(result.tool_use_id, []).append(result)
    return out


async def check_record(
    rig: Rig, session: AgentSession | None = None, *, lossy: bool = False
) -> list[Message]:
    """The invariants every ending must leave; returns the durable history. ``lossy``: the
    journal stopped recording part-way (a store that failed for good)."""
    store, effects = rig.store, rig.effects
    turns = await store.turns(rig.session_id)
    assert all(t.status != "running" for t in turns), [t.status for t in turns]
    # Exactly one stored terminal event per turn.
    events = await store.events_after(rig.session_id)
    for turn in turns:
        ends = [
            e.type
            for e in events
            if e.turn_id == turn.id and e.type in ("done", "incomplete", "error")
        ]
        assert len(ends) == 1, (turn.status, ends)
    # No message stored twice.
    for turn in turns:
        bodies = [repr(m.message) for m in await store.turn_messages(turn.id)]
        assert len(bodies) == len(set(bodies)), "a message was stored twice"

    messages = await durable_history(store, rig.session_id)
    uses = [use for m in messages if m.role == "assistant" for use in m.tool_uses]
    ids = [use.id for use in uses]
    assert len(ids) == len(set(ids)), f"a tool call appears twice: {ids}"
    results = results_by_id(messages)
    assert set(results) == set(ids), (set(results), set(ids))
    calls = {c.call_id: c for c in await store.tool_calls(session_id=rig.session_id)}
    for use in uses:
        (result,) = results[use.id]  # exactly one result per call
        key = str(use.input["key"])
        if key in effects.finished and not (lossy and result.content.startswith(CUT_TEXTS)):
            # The tool ran to the end: its real output, never "interrupted" — unless the
            # journal died before it could record it, and then never "it did not run".
            assert result.content == effects.finished[key], (key, result.content)
            assert not result.is_error
        elif result.content == NOT_RUN_TEXT:
            assert key not in effects.started, f"{use.name}({key}) ran but is recorded as not"
        else:
            assert result.is_error and result.content.startswith(CUT_TEXTS), result
        record = calls.get(use.id)
        if record is not None:
            assert record.state in ("output-available", "output-error", "denied", "interrupted")
            if record.state == "output-available":
                assert not result.is_error and result.content == record.output
            else:
                assert result.is_error
    for protocol, problems in request_problems([*messages, user_message("next")]).items():
        assert not problems, (protocol, problems)
    if session is not None:
        _memory_matches(session, messages)
    return messages


def _memory_matches(session: AgentSession, durable: Sequence[Message]) -> None:
    """What the process keeps for the next turn says the same as the journal."""
    memory = [*session.convo.messages(), *session.pending]
    mem_uses = [u.id for m in memory if m.role == "assistant" for u in m.tool_uses]
    assert len(mem_uses) == len(set(mem_uses)), f"a call twice in memory: {mem_uses}"
    durable_results = results_by_id(durable)
    for call_id, found in results_by_id(memory).items():
        assert len(found) == 1, f"two results for {call_id} in memory"
        assert durable_results[call_id][0].content == found[0].content, call_id


def terminal(events: Sequence[Event]) -> TerminalEvent | None:
    for event in reversed(events):
        if event.type in ("done", "incomplete", "error"):
            return event  # type: ignore[return-value]
    return None
