"""The runner's guards: one running turn per session, a lost lease stops the turn, and the
conversation settings a caller gives a new session are the ones it uses."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from drover.core.conversation import ConversationManager
from drover.core.events import Event, TextDelta
from drover.errors import SessionBusyError
from drover.journal.records import TurnRecord
from drover.runtime.runner import Runner
from drover.store.sqlite.store import SqliteStore
from drover.testing.scripted import Reply, ScriptedProvider
from drover.tools.registry import ToolRegistry
from drover.turn.permissions import PermissionPolicy
from drover.turn.state import AgentSession

from .turn_rig import SETTINGS, Recorder


class Seen(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.text = asyncio.Event()

    async def send(self, event: Event) -> None:
        await super().send(event)
        if isinstance(event, TextDelta):
            self.text.set()


async def _session(
    runner: Runner, session_id: str, provider: ScriptedProvider, tmp_path: Path
) -> AgentSession:
    record = await runner.store.get_session(session_id)
    assert record is not None
    return await runner.agent_session(
        record,
        provider=provider,
        tools=ToolRegistry([]),
        workdir=tmp_path,
        policy=PermissionPolicy("allow"),
        settings=SETTINGS,
        convo=ConversationManager(system_prompt="Be brief.", context_limit=1234),
    )


def test_a_new_session_keeps_the_conversation_it_is_given(tmp_path: Path) -> None:
    convo = ConversationManager(system_prompt="Be brief.", context_limit=1234)
    session = AgentSession(
        provider=ScriptedProvider([]), tools=ToolRegistry([]), workdir=tmp_path, convo=convo
    )
    assert session.convo is convo  # an empty manager is still the one to use


async def test_the_first_request_carries_the_system_prompt(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "j.db") as store:
        record = await store.create_session(workdir=str(tmp_path), model="m")
        provider = ScriptedProvider([Reply(text="hi")])
        runner = Runner(store)
        session = await _session(runner, record.id, provider, tmp_path)
        await runner.run(session, "hello", [Recorder()])
        assert provider.requests[0].system == "Be brief."
        assert session.convo.context_limit == 1234


async def test_a_second_turn_on_a_busy_session_is_refused(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "j.db") as store:
        record = await store.create_session(workdir=str(tmp_path), model="m")
        slow = ScriptedProvider([Reply(text="taking my time", stall_after=3)])
        first = Runner(store)
        seen = Seen()
        running = asyncio.create_task(
            first.run(await _session(first, record.id, slow, tmp_path), "one", [seen])
        )
        await asyncio.wait_for(seen.text.wait(), timeout=10)
        second = Runner(store)
        other = await _session(second, record.id, ScriptedProvider([Reply(text="x")]), tmp_path)
        with pytest.raises(SessionBusyError) as busy:
            await second.run(other, "two", [Recorder()])
        (turn,) = await store.turns(record.id)
        assert busy.value.turn_id == turn.id
        assert turn.id in str(busy.value)
        slow.release.set()
        outcome = await asyncio.wait_for(running, timeout=10)
        assert outcome.event.type == "done"
        # Once it ended, the session takes the next turn.
        other = await _session(second, record.id, ScriptedProvider([Reply(text="x")]), tmp_path)
        assert (await second.run(other, "two", [Recorder()])).event.type == "done"
        assert [t.status for t in await store.turns(record.id)] == ["completed", "completed"]


async def test_a_lost_lease_stops_the_turn_and_nothing_overwrites_the_recovery(
    tmp_path: Path,
) -> None:
    async with SqliteStore(tmp_path / "j.db") as store:
        record = await store.create_session(workdir=str(tmp_path), model="m")
        provider = ScriptedProvider([Reply(text="stalled answer", stall_after=3)])
        runner = Runner(store, lease_seconds=0.3)
        seen = Seen()
        running = asyncio.create_task(
            runner.run(await _session(runner, record.id, provider, tmp_path), "go", [seen])
        )
        await asyncio.wait_for(seen.text.wait(), timeout=10)
        # Another process decides this one is gone and recovers its turn.
        (turn,) = await store.turns(record.id)
        assert await store.recover_orphans(is_alive=lambda owner: False) == [turn.id]
        outcome = await asyncio.wait_for(running, timeout=10)
        # Stopped by whichever noticed first: the lease renewal or a refused write.
        assert outcome.event.type in ("error", "incomplete")
        assert outcome.event.reason == "error"  # type: ignore[union-attr]
        assert "another process" in outcome.event.error  # type: ignore[union-attr]
        (after,) = await store.turns(record.id)
        assert after.status == "interrupted"  # the recovery's verdict stands
        ends = [e for e in await store.events_after(record.id) if e.type in ("error", "incomplete")]
        assert len(ends) == 1


class GatedBegin(SqliteStore):
    """A store whose ``begin_turn`` writes the turn, then waits for the test's gate."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.begun = asyncio.Event()
        self.gate = asyncio.Event()

    async def begin_turn(self, *args: Any, **kwargs: Any) -> TurnRecord:
        turn = await super().begin_turn(*args, **kwargs)
        self.begun.set()
        await self.gate.wait()
        return turn


async def test_a_turn_cancelled_while_it_begins_ends_interrupted_and_says_so_live(
    tmp_path: Path,
) -> None:
    published: list[tuple[int, dict[str, Any]]] = []
    async with GatedBegin(tmp_path / "j.db") as store:
        record = await store.create_session(workdir=str(tmp_path), model="m")
        runner = Runner(
            store, on_event=lambda sid, seq, tid, payload, prev: published.append((seq, payload))
        )
        session = await _session(
            runner, record.id, ScriptedProvider([Reply(text="never")]), tmp_path
        )
        running = asyncio.create_task(runner.run(session, "go"))
        await asyncio.wait_for(store.begun.wait(), timeout=10)
        running.cancel()
        store.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await running
        (turn,) = await store.turns(record.id)
        assert turn.status == "interrupted"
        (end,) = [
            e for e in await store.events_after(record.id) if e.type in ("error", "incomplete")
        ]
        # The one terminal event went to the live followers too, under its stored number.
        assert published == [(end.seq, end.payload)]
        assert end.payload["reason"] == "interrupted"
