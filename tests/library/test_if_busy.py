"""``if_busy``: a message sent while a turn of the session runs — queued (durably, run in
order once each after the turn), or stopping the turn with its work kept (``interrupt``) or
discarded (``rollback``); histories stay valid on the three protocols."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from drover import Agent, ToolContext, tool
from drover.agent.session import Session
from drover.config.settings import Config
from drover.core.events import Event, StepStarted, TextDelta, ToolStateChanged
from drover.errors import SessionBusyError
from drover.journal.records import QueuedMessage
from drover.runtime.turns import RunningTurn
from drover.testing.scripted import Reply, ScriptedProvider, call, request_problems

#: Seconds: a failure bound for a wait, never a synchronisation.
BOUND = 60.0

#: Set by a test to hold the ``slow`` tool until it is set again.
GATE: dict[str, asyncio.Event] = {}


@tool()
async def slow(ctx: ToolContext, label: str) -> str:
    """Wait until the test lets the call finish."""
    GATE["entered"].set()
    await GATE["go"].wait()
    return f"slow {label} done"


def agent_for(provider: ScriptedProvider, tmp_path: Path) -> Agent:
    return Agent(
        provider,
        tools=[slow],
        store=str(tmp_path / "journal.db"),
        workdir=tmp_path,
        config=Config(),
        permission_mode="allow",
    )


@pytest.fixture(autouse=True)
def gate() -> None:
    GATE["entered"] = asyncio.Event()
    GATE["go"] = asyncio.Event()


def user_texts(provider: ScriptedProvider, request: int) -> list[str]:
    return [m.text for m in provider.requests[request].messages if m.role == "user" and m.text]


async def started(session: Session, prompt: str) -> RunningTurn:
    running = await session.submit(prompt)
    assert isinstance(running, RunningTurn)
    return running


async def event_types(agent: Agent, session_id: str) -> list[str]:
    return [e.type for e in await agent.store.events_after(session_id)]


async def test_two_messages_queued_during_a_turn_run_after_it_in_order(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [
            Reply(calls=[call("slow", label="a")]),
            Reply(text="first done"),
            Reply(text="second done"),
            Reply(text="third done"),
        ]
    )
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        first = await started(session, "first")
        await GATE["entered"].wait()
        with pytest.raises(SessionBusyError):
            await session.submit("rejected")
        second = await session.submit("second", if_busy="enqueue")
        third = await session.submit("third", if_busy="enqueue")
        assert isinstance(second, QueuedMessage) and isinstance(third, QueuedMessage)
        assert [m.id for m in await session.queued()] == [second.id, third.id]
        waiting = asyncio.ensure_future(agent.run("fourth?", session=session.id))
        GATE["go"].set()
        assert first.task is not None
        await first.task
        # The library's own call waits for its queued message's turn.
        later = await asyncio.wait_for(agent.runner.queue.turn_of(session.id, third.id), BOUND)
        assert later.task is not None
        outcome = await later.task
        assert outcome.event.type == "done"
        with pytest.raises(SessionBusyError):
            await waiting  # a plain run is still refused while the queue runs
        assert await session.queued() == []
        stored = await agent.store.queued_messages(session.id, every=True)
        assert [(m.content, m.status) for m in stored] == [
            ("second", "started"),
            ("third", "started"),
        ]
        turns = await agent.store.turns(session.id)
        assert [t.status for t in turns] == ["completed"] * 3
        assert [m.turn_id for m in stored] == [turns[1].id, turns[2].id]
        types = await event_types(agent, session.id)
        assert types.count("message_queued") == 2
        assert types.count("message_started") == 2
        # The queued messages were announced inside the first turn, before its end.
        first_end = types.index("done")
        assert types.index("message_queued") < first_end
    assert user_texts(provider, 2)[-1] == "second"
    assert user_texts(provider, 3)[-1] == "third"


async def test_run_with_enqueue_returns_the_result_of_its_own_turn(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [Reply(calls=[call("slow", label="a")]), Reply(text="one"), Reply(text="two")]
    )
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        first = await started(session, "first")
        await GATE["entered"].wait()
        queued = asyncio.ensure_future(session.run("next", if_busy="enqueue"))
        # Released once the message is in the journal (nothing tells of it in this process).
        while not await session.queued():  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        GATE["go"].set()
        result = await queued
        assert first.task is not None and first.task.done()
        assert result.text == "two" and result.completed


async def test_a_cancelled_message_never_runs(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [Reply(calls=[call("slow", label="a")]), Reply(text="one"), Reply(text="kept")]
    )
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        first = await started(session, "first")
        await GATE["entered"].wait()
        dropped = await session.submit("dropped", if_busy="enqueue")
        kept = await session.submit("kept", if_busy="enqueue")
        assert isinstance(dropped, QueuedMessage) and isinstance(kept, QueuedMessage)
        assert await session.cancel_queued(dropped.id)
        assert not await session.cancel_queued(dropped.id)
        GATE["go"].set()
        assert first.task is not None
        await first.task
        last = await asyncio.wait_for(agent.runner.queue.turn_of(session.id, kept.id), BOUND)
        assert last.task is not None
        await last.task
        stored = await agent.store.queued_messages(session.id, every=True)
        assert [(m.content, m.status) for m in stored] == [
            ("dropped", "cancelled"),
            ("kept", "started"),
        ]
        assert "message_cancelled" in await event_types(agent, session.id)
    assert all("dropped" not in user_texts(provider, i) for i in range(len(provider.requests)))


async def test_enqueue_on_an_idle_session_runs_at_once(tmp_path: Path) -> None:
    provider = ScriptedProvider([Reply(text="now")])
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        running = await session.submit("hello", if_busy="enqueue")
        assert isinstance(running, RunningTurn)
        assert running.task is not None
        await running.task
        assert await agent.store.queued_messages(session.id, every=True) == []


# -- interrupt and rollback at several points of a tool turn ----------------------------------


class Reached:
    """A live sink that tells when the turn reaches a point: a tool call's input streaming,
    or text of the model call after the tool's."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.step = 0
        self.event = asyncio.Event()

    async def send(self, event: Event) -> None:
        if isinstance(event, StepStarted):
            self.step = event.step
            return
        calling = self.point == "call streaming" and isinstance(event, ToolStateChanged)
        answering = self.point == "answer streaming" and isinstance(event, TextDelta)
        if calling or (answering and self.step == 2):
            self.event.set()


POINTS = ["call streaming", "tool running", "answer streaming"]


def script_for(point: str) -> list[Reply]:
    """A tool turn that stops at ``point``, then the new message's answer."""
    work = Reply(
        text="Let me work.",
        calls=[call("slow", label="w")],
        stall_after=6 if point == "call streaming" else None,
    )
    if point == "answer streaming":
        return [work, Reply(text="partial answer that goes on", stall_after=3), Reply(text="new")]
    return [work, Reply(text="new")]


async def stop_at(point: str, session: Session) -> RunningTurn:
    """Start the tool turn and wait until it reaches ``point``."""
    reached = Reached(point)
    running = await session.submit("do the work", live=[reached])
    assert isinstance(running, RunningTurn)
    if point == "tool running":
        await GATE["entered"].wait()
    else:
        if point == "answer streaming":
            GATE["go"].set()
        await reached.event.wait()
    return running


NO_PROBLEMS = {"anthropic": [], "openai": [], "openai-responses": []}


@pytest.mark.parametrize("point", POINTS)
async def test_interrupt_keeps_the_work_and_the_new_message_resumes_it(
    tmp_path: Path, point: str
) -> None:
    provider = ScriptedProvider(script_for(point))
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        first = await stop_at(point, session)
        result = await session.run("change of plan", if_busy="interrupt")
        assert result.completed and result.text == "new"
        assert first.end is not None and first.end.type == "incomplete"
        turns = await agent.store.turns(session.id)
        assert [(t.status, t.discarded) for t in turns] == [
            ("interrupted", False),
            ("completed", False),
        ]
        last = len(provider.requests) - 1
        assert user_texts(provider, last) == ["do the work", "change of plan"]
        messages = provider.requests[last].messages
        assert any(m.role == "assistant" for m in messages)  # the work is kept and sent
        if point != "call streaming":
            assert any(m.tool_uses for m in messages)
        assert request_problems(messages) == NO_PROBLEMS


@pytest.mark.parametrize("point", POINTS)
async def test_rollback_discards_the_work_and_runs_the_new_message(
    tmp_path: Path, point: str
) -> None:
    provider = ScriptedProvider(script_for(point))
    async with agent_for(provider, tmp_path) as agent:
        session = await agent.session()
        await stop_at(point, session)
        result = await session.run("start over", if_busy="rollback")
        assert result.completed and result.text == "new"
        turns = await agent.store.turns(session.id)
        assert [(t.status, t.discarded) for t in turns] == [
            ("interrupted", True),
            ("completed", False),
        ]
        # The discarded turn stays in the journal with its messages.
        assert await agent.store.turns_with_messages(session.id)
        messages = provider.requests[-1].messages
        assert user_texts(provider, len(provider.requests) - 1) == ["start over"]
        assert not any(m.tool_uses for m in messages)
        assert request_problems(messages) == NO_PROBLEMS
