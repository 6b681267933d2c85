"""The hub keeps a live feed (a ring of up to 2048 frames) only while a session has a turn
running in this process or a reader following it: after a turn that came from the queue, a
rewind of an idle session, a dead process's turn recovered, or a door reading where a new
turn's stream would start, an idle session has no feed — while a reader that follows the
session throughout still sees every event the log holds. Through the server's
:class:`~drover.server.service.Service`, wired to its hub as ``drover serve`` wires it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from drover import Agent
from drover.agent.rewind import RewindResult
from drover.config.settings import Config
from drover.core.messages import user_message
from drover.journal.records import SessionRecord
from drover.runtime.hub import Frame, Hub
from drover.server.doors import log_position
from drover.server.follow import Follower, Reset, frame_event
from drover.server.service import Service
from drover.testing.scripted import Reply, ScriptedProvider, call
from drover.tools.builtin.files import write_file

from .support import BOUND


@dataclass
class Served:
    agent: Agent
    provider: ScriptedProvider
    hub: Hub
    service: Service
    record: SessionRecord


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    work = tmp_path / "work"
    work.mkdir()
    provider = ScriptedProvider(
        [
            Reply(calls=[call("write_file", path="a.txt", content="one\n")], stall_after=2),
            Reply(text="wrote it"),
            Reply(text="the queued message's answer"),
        ]
    )
    agent = Agent(
        provider,
        tools=[write_file],
        store=str(tmp_path / "journal.db"),
        workdir=work,
        config=Config(),
        permission_mode="allow",
    )
    async with agent:
        hub = Hub()
        service = Service(agent=agent, hub=hub)
        record = await service.create_session(None)
        yield Served(agent, provider, hub, service, record)
        await service.shutdown()


async def _two_turns(served: Served) -> list[str]:
    """A turn posted, a message queued behind it, the turn let go: the queued message's turn
    runs from the queue. Returns once both ended here; their ids."""
    service, record = served.service, served.record
    first = await service.post_message(record, "write a.txt")
    assert isinstance(first, str)
    queued = await service.post_message(record, "and then?", if_busy="enqueue")
    assert not isinstance(queued, str)
    served.provider.release.set()
    return await _until_idle(served, 2)


async def _until_idle(served: Served, count: int) -> list[str]:
    """Until the session's first ``count`` turns ended and no turn of it runs here; their
    ids."""
    runner, store, session_id = served.agent.runner, served.agent.store, served.record.id
    async with asyncio.timeout(BOUND):
        while True:
            running = runner.running(session_id)
            if running is not None and running.task is not None:
                await asyncio.wait({running.task})
                continue
            ended = [t.id for t in await store.turns(session_id) if t.status != "running"]
            if len(ended) >= count and runner.running(session_id) is None:
                return ended
            # Between two turns: the queue starts the next in a task of its own.
            await asyncio.sleep(0.01)


async def test_a_turn_from_the_queue_leaves_no_feed(served: Served) -> None:
    first, second = await _two_turns(served)
    turns = await served.agent.store.turns(served.record.id)
    assert [(t.id, t.status) for t in turns] == [(first, "completed"), (second, "completed")]
    assert len(served.hub) == 0


async def test_a_rewind_of_an_idle_session_leaves_no_feed(served: Served) -> None:
    served.provider.release.set()
    first = await served.service.post_message(served.record, "write a.txt")
    assert isinstance(first, str)
    await _until_idle(served, 1)
    assert len(served.hub) == 0  # (a posted turn's end always let its feed go)
    result = await served.service.rewind(
        served.record, first, files=True, force=False, dry_run=False
    )
    assert isinstance(result, RewindResult) and result.rewound == (first,)
    assert len(served.hub) == 0


async def test_a_recovered_turn_and_a_doors_start_leave_no_feed(served: Served) -> None:
    store = served.agent.store
    # A turn a dead process left running; the takeover sweep ends it.
    other = await store.create_session(workdir="/w", model="m")
    # (pid 0 of this host: a process that is gone)
    await store.begin_turn(other.id, user_message("x"), f"{socket.gethostname()}:0:0", 30)
    found = await served.agent.runner.recover()
    assert list(found.values()) == [other.id]
    # Where a door's new turn would start its stream (a turn then refused as busy, say).
    assert await log_position(served.service, served.record.id) >= 0
    assert len(served.hub) == 0


async def test_a_reader_following_throughout_sees_every_event(served: Served) -> None:
    reader = Follower(served.service, served.record)
    seen: list[dict[str, Any]] = []
    await reader.open()
    try:
        _take(seen, await reader.catch_up(0))
        task = asyncio.create_task(_two_turns(served))
        async with asyncio.timeout(BOUND):
            while not task.done() or _ends(seen) < 2:
                batch = await reader.next(0.05)
                assert batch is not None
                _take(seen, batch)
        first, second = await task
        assert len(served.hub) == 1  # the reader's
        result = await served.service.rewind(
            served.record, first, files=True, force=False, dry_run=False
        )
        assert isinstance(result, RewindResult) and result.rewound == (first, second)
        async with asyncio.timeout(BOUND):
            while not any(e["type"] == "turns_rewound" for e in seen):
                batch = await reader.next(0.05)
                assert batch is not None
                _take(seen, batch)
    finally:
        reader.close()
    logged = await served.agent.store.events_after(served.record.id)
    assert [e["seq"] for e in seen] == sorted({r.end_seq for r in logged} | _deltas(seen))
    assert {e["type"] for e in seen} >= {"turn_started", "done", "turns_rewound"}
    assert {e["turn_id"] for e in seen if e["type"] == "done"} == {first, second}
    assert len(served.hub) == 0  # the reader left; nothing runs


def _take(seen: list[dict[str, Any]], batch: list[Any]) -> None:
    for item in batch:
        assert not isinstance(item, Reset), "a reader following throughout is never reset"
        if isinstance(item, Frame):
            seen.append(frame_event(item))


def _ends(seen: list[dict[str, Any]]) -> int:
    return sum(1 for e in seen if e["type"] == "done")


def _deltas(seen: list[dict[str, Any]]) -> set[int]:
    return {e["seq"] for e in seen if e["type"] == "text_delta"}
