"""The asking side of a stop across processes (:class:`drover.cluster.remote_stop.RemoteStops`)
in the cases the two-process test in ``tests/scale/test_scale.py`` cannot reach in its time:
the other process never answers, its answer is lost, another turn starts meanwhile, the control
channel fails, the asking request is cancelled mid-wait; and, through the service, which turn
a refusal after a lost race names.

This process's runner is real (on a real SQLite journal); the other process is what the asker
sees of it: the journal's answer to "which turn runs in this session, where" (a function whose
answer the test changes) and the control channel (a function that records what is sent).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from drover import Agent
from drover.cluster.remote_stop import RemoteStops
from drover.config.settings import Config
from drover.core.messages import user_message
from drover.errors import SessionBusyError
from drover.runtime.hub import Hub
from drover.runtime.runner import Runner
from drover.server.service import Service
from drover.store import open_store
from drover.testing.scripted import ScriptedProvider

SESSION, TURN, OTHER = "s1", "t1", "process-b"
#: A failure bound for waits that must end much sooner.
BOUND = 10.0


class OtherProcess:
    """The other process as the asker sees it: the journal's running turn, and the messages
    sent to it (each one also sets ``asked``)."""

    def __init__(self) -> None:
        self.running: tuple[str, str | None] | None = (TURN, OTHER)
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.asked = asyncio.Event()
        self.reachable = True
        self.reads = 0

    async def running_turn(self, session_id: str) -> tuple[str, str | None] | None:
        self.reads += 1
        return self.running

    async def send(self, owner: str, message: dict[str, Any]) -> bool:
        self.sent.append((owner, message))
        self.asked.set()
        return self.reachable


@pytest.fixture
async def runner(tmp_path: Path) -> AsyncIterator[Runner]:
    store = open_store(str(tmp_path / "journal.db"))
    await store.open()
    try:
        yield Runner(store)
    finally:
        await store.close()


def stops(runner: Runner, other: OtherProcess, **timing: float) -> RemoteStops:
    return RemoteStops(runner, other.running_turn, other.send, **timing)


async def test_a_turn_that_does_not_stop_in_time_leaves_the_message_busy(runner: Runner) -> None:
    other = OtherProcess()
    began = time.monotonic()
    stopped = await asyncio.wait_for(
        stops(runner, other, timeout=0.3, check_every=0.05).stop(SESSION, TURN), BOUND
    )
    assert stopped is False
    assert time.monotonic() - began >= 0.3
    ((owner, message),) = other.sent
    assert owner == OTHER
    assert message == {"op": "stop", "session": SESSION, "turn": TURN, "reply_to": runner.owner}
    assert other.reads >= 3  # the journal was read while waiting, not once


async def test_a_lost_answer_is_covered_by_reading_the_journal(runner: Runner) -> None:
    other = OtherProcess()
    task = asyncio.create_task(
        stops(runner, other, timeout=BOUND, check_every=0.05).stop(SESSION, TURN)
    )
    await asyncio.wait_for(other.asked.wait(), BOUND)
    other.running = None  # the turn ended (or was taken over); its process's word never came
    assert await asyncio.wait_for(task, BOUND) is True


async def test_the_answer_ends_the_wait_before_the_next_journal_read(runner: Runner) -> None:
    other = OtherProcess()
    remote = stops(runner, other, timeout=BOUND * 3, check_every=BOUND * 3)
    task = asyncio.create_task(remote.stop(SESSION, TURN))
    await asyncio.wait_for(other.asked.wait(), BOUND)
    other.running = None
    assert remote.on_control({"op": "stopped", "session": SESSION, "turn": TURN}) is True
    # Reading the journal again only every 30 s, the answer is what wakes the wait.
    assert await asyncio.wait_for(task, BOUND) is True


async def test_another_turn_started_meanwhile_leaves_the_message_busy(runner: Runner) -> None:
    other = OtherProcess()
    task = asyncio.create_task(
        stops(runner, other, timeout=BOUND, check_every=0.05).stop(SESSION, TURN)
    )
    await asyncio.wait_for(other.asked.wait(), BOUND)
    other.running = ("t2", "process-c")  # the stopped turn's queue ran somewhere first
    assert await asyncio.wait_for(task, BOUND) is False


async def test_an_unreachable_process_leaves_the_message_busy_at_once(runner: Runner) -> None:
    other = OtherProcess()
    other.reachable = False
    remote = stops(runner, other, timeout=BOUND, check_every=BOUND)
    assert await asyncio.wait_for(remote.stop(SESSION, TURN), BOUND / 2) is False


async def test_nothing_to_ask_when_the_turn_is_over_or_runs_here(runner: Runner) -> None:
    other = OtherProcess()
    other.running = None
    assert await stops(runner, other).stop(SESSION, TURN) is True
    other.running = (TURN, runner.owner)  # this process's own turn is not asked for remotely
    assert await stops(runner, other).stop(SESSION, TURN) is False
    other.running = ("t0", OTHER)  # the turn the message found busy is not the one running
    assert await stops(runner, other).stop(SESSION, TURN) is False
    assert other.sent == []


async def test_a_request_cancelled_mid_wait_ends_at_once_and_leaves_no_waiter(
    runner: Runner,
) -> None:
    other = OtherProcess()
    remote = stops(runner, other, timeout=BOUND * 3, check_every=BOUND * 3)
    task = asyncio.create_task(remote.stop(SESSION, TURN))
    await asyncio.wait_for(other.asked.wait(), BOUND)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, BOUND)
    # The answer that comes after is harmless; a new stop for the same turn waits afresh
    # (the cancelled wait's event is gone: it does not count as this one's answer).
    assert remote.on_control({"op": "stopped", "session": SESSION, "turn": TURN}) is True
    other.asked.clear()
    again = asyncio.create_task(remote.stop(SESSION, TURN))
    await asyncio.wait_for(other.asked.wait(), BOUND)
    reads = other.reads
    for _ in range(50):  # let the loop run: a stale answer would wake the wait again and again
        await asyncio.sleep(0)
    assert not again.done() and other.reads == reads
    other.running = None
    remote.on_control({"op": "stopped", "session": SESSION, "turn": TURN})
    assert await asyncio.wait_for(again, BOUND) is True


async def test_the_409_after_a_lost_race_names_the_turn_that_runs_now(tmp_path: Path) -> None:
    """Through the service: the session's turn runs in another process (its row in the
    journal, a live lease); the message that would interrupt it asks that process to stop it,
    but another turn starts meanwhile. The message is refused as busy, naming that new turn —
    the one a client can follow or interrupt — not the one it asked to stop."""
    provider = ScriptedProvider([])
    agent = Agent(
        provider, tools=[], store=str(tmp_path / "j.db"), workdir=tmp_path, config=Config()
    )
    async with agent:
        session = await agent.session()
        record = await agent.store.get_session(session.id)
        assert record is not None
        theirs = await agent.store.begin_turn(session.id, user_message("x"), "b:1:1", 3600)
        other = OtherProcess()
        other.running = (theirs.id, "b:1:1")

        async def send(owner: str, message: dict[str, Any]) -> bool:
            other.running = ("t-new", "c:1:1")  # the stopped turn's queue ran in a third process
            return await other.send(owner, message)

        service = Service(
            agent=agent, hub=Hub(), running_elsewhere=other.running_turn, send_control=send
        )
        with pytest.raises(SessionBusyError) as refused:
            await asyncio.wait_for(service.post_message(record, "now", if_busy="interrupt"), BOUND)
        assert refused.value.turn_id == "t-new"
        assert [m["op"] for _, m in other.sent] == ["stop"]
    assert provider.requests == []  # the message's turn never started
