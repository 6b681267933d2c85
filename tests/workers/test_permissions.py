"""Workers ask permission through the parent's round-trip, one request at a time, and a
pending request is abandoned when the turn is interrupted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from drover.core.events import Done, PermissionRequest, ToolStateChanged
from drover.runtime.runner import Runner
from drover.testing.server import FakeLLMServer
from drover.turn.permissions import PermissionPolicy

from .conftest import Rig, Watcher, marker

PROMPT = "Write two files with workers."


def writer_tasks(server: FakeLLMServer, worker_servers: list[FakeLLMServer]) -> None:
    tasks = [{"description": f"write {i}", "prompt": f"{marker(i)} write out{i}"} for i in (0, 1)]
    server.script({"tool_calls": [{"name": "task", "input": {"tasks": tasks}}]}, {"text": "ok"})
    for i in (0, 1):
        worker_servers[i].script(
            {
                "tool_calls": [
                    {"name": "write_file", "input": {"path": f"out{i}.txt", "content": f"{i}"}}
                ]
            },
            {"text": f"wrote {i}"},
        )


def both_waiting(watcher: Watcher) -> bool:
    waiting = {
        e.event.call_index
        for e in watcher.worker_events()
        if isinstance(e.event, ToolStateChanged) and e.event.state == "awaiting-permission"
    }
    return waiting == {0, 100} and len(worker_requests(watcher)) >= 1


def worker_requests(watcher: Watcher) -> list[PermissionRequest]:
    return [r for r in watcher.requests() if r.tool_name != "task"]


async def start(rig: Rig, watcher: Watcher) -> asyncio.Task[Any]:
    """The turn in ``ask`` mode; the task call itself (side-effecting: its workers may write)
    is allowed when it asks."""
    session = await rig.session()
    session.policy = PermissionPolicy("ask")
    task = asyncio.get_running_loop().create_task(Runner(rig.store).run(session, PROMPT, [watcher]))
    await watcher.wait_for(lambda w: bool(w.requests()))
    (delegate,) = watcher.requests()
    assert delegate.tool_name == "task"
    delegate.decide("allow")
    return task


async def test_one_request_at_a_time(
    rig: Rig, fake_llm: FakeLLMServer, worker_servers: list[FakeLLMServer]
) -> None:
    writer_tasks(fake_llm, worker_servers)
    watcher = Watcher(answer=False)
    task = await start(rig, watcher)
    await watcher.wait_for(both_waiting)
    # Both workers wait for a decision, but only one request is out.
    (first,) = worker_requests(watcher)
    first.decide("allow")
    await watcher.wait_for(lambda w: len(worker_requests(w)) == 2)
    second = worker_requests(watcher)[1]
    # Each request names its call as stored: unique across workers.
    assert first.call_id != second.call_id
    stored = {c.call_id for c in await rig.store.tool_calls(session_id=rig.session_id)}
    assert {first.call_id, second.call_id} <= stored
    assert {r.summary for r in (first, second)} == {"write_file: out0.txt", "write_file: out1.txt"}
    second.decide("deny")
    outcome = await asyncio.wait_for(task, 30)
    assert isinstance(outcome.event, Done)
    written = sorted(p.name for p in rig.path.glob("out*.txt"))
    assert len(written) == 1
    denied = [
        e.event
        for e in watcher.worker_events()
        if isinstance(e.event, ToolStateChanged) and e.event.state == "denied"
    ]
    assert len(denied) == 1


async def test_interrupt_abandons_a_pending_request(
    rig: Rig, fake_llm: FakeLLMServer, worker_servers: list[FakeLLMServer]
) -> None:
    writer_tasks(fake_llm, worker_servers)
    watcher = Watcher(answer=False)
    task = await start(rig, watcher)
    await watcher.wait_for(both_waiting)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (request,) = worker_requests(watcher)
    assert request.decision.done() and not request.decide("allow")
    assert not list(rig.path.glob("out*.txt"))
    (turn,) = await rig.store.turns(rig.session_id)
    assert turn.status == "interrupted"
    calls = await rig.store.tool_calls(session_id=rig.session_id)
    assert {c.name: c.state for c in calls if c.name == "write_file"} == {
        "write_file": "interrupted"
    }
