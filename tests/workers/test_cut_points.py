"""A parent turn fanning out to three workers, cut at every event a consumer handles, then
resumed by the next message: nothing finished is redone and nothing is lost.

In process (:class:`~drover.testing.scripted.ScriptedProvider`, one script per worker, routed
by the worker's prompt) through the real Runner on a real SQLite file. The cut points are
counted from a clean run at collection time. After each cut, through the journal: no turn
left running, no tool call left open (a worker's included), every call answered once, the
next request valid on all three protocols. After the resume: the turn completes; the
``task`` call's result holds all three workers' answers; a worker that had finished before
the cut is not run again and keeps its answer; a worker tool that had finished keeps its
output in the resumed worker's history.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from drover.core.conversation import ConversationManager
from drover.core.events import TERMINAL_TOOL_STATES, Event
from drover.core.messages import user_message
from drover.core.sinks import EventRecorder
from drover.runtime.runner import Runner, load_history
from drover.runtime.workers import RESULT_HEADER, Coordinator, add_task_tool, worker_states
from drover.store.sqlite.store import SqliteStore
from drover.testing.scripted import Reply, ScriptedProvider, call, request_problems
from drover.tools.base import ToolContext
from drover.tools.decorator import tool
from drover.tools.registry import ToolRegistry
from drover.turn.loop import LoopSettings
from drover.turn.permissions import PermissionPolicy

from .conftest import Routed, marker

SETTINGS = LoopSettings(stream_retry_delay=0.0, compaction=False)
TASKS = [{"description": f"look {i}", "prompt": f"{marker(i)} look at k{i}"} for i in range(3)]


def first_scripts() -> tuple[ScriptedProvider, list[ScriptedProvider]]:
    parent = ScriptedProvider(
        [
            Reply(text="Fanning out.", calls=[call("task", id="task_1", tasks=TASKS)]),
            Reply(text="All three looked."),
        ]
    )
    workers = [
        ScriptedProvider(
            [
                Reply(text=f"Looking at k{i}.", calls=[call("look", id=f"look_{i}", key=f"k{i}")]),
                Reply(text=f"answer {i}", chunk=3),
            ]
        )
        for i in range(3)
    ]
    return parent, workers


def resume_scripts() -> tuple[ScriptedProvider, list[ScriptedProvider]]:
    parent = ScriptedProvider([Reply(text="Picked up.")])
    workers = [ScriptedProvider([Reply(text=f"resumed answer {i}")]) for i in range(3)]
    return parent, workers


class Probe:
    """Counts the live events of a turn and cancels the turn at the ``at``-th."""

    def __init__(self, at: int = -1) -> None:
        self.at, self.count = at, 0
        self.task: asyncio.Task[Any] | None = None
        self.fired: str | None = None

    async def send(self, event: Event) -> None:
        n, self.count = self.count, self.count + 1
        if n == self.at and self.task is not None:
            self.fired = event.type
            self.task.cancel()


class Rig:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.store = SqliteStore(tmp / "j.db")
        self.looked: list[str] = []  # the calls of ``look`` that started
        self.finished: list[str] = []  # and those that returned
        self.session_id = ""

    async def open(self) -> None:
        await self.store.open()
        record = await self.store.create_session(workdir=str(self.tmp), model="scripted:m")
        self.session_id = record.id

    def tools(self) -> ToolRegistry:
        looked, finished = self.looked, self.finished

        @tool(read_only=True)
        async def look(ctx: ToolContext, key: str) -> str:
            """Look at a key."""
            looked.append(key)
            await asyncio.sleep(0)  # a cut may land here: the call started, did not finish
            finished.append(key)
            return f"{key} looks fine"

        tools = ToolRegistry([look])
        add_task_tool(tools, Coordinator(self.store))
        return tools

    async def run(
        self, prompt: str, providers: tuple[ScriptedProvider, list[ScriptedProvider]], probe: Probe
    ) -> Any:
        parent, workers = providers
        record = await self.store.get_session(self.session_id)
        assert record is not None
        tools = self.tools()
        coordinator = tools.get("task")
        assert isinstance(coordinator, Coordinator)
        session = await Runner(self.store).agent_session(
            record,
            provider=Routed(parent, workers),
            tools=tools,
            workdir=self.tmp,
            policy=PermissionPolicy("allow"),
            settings=SETTINGS,
            convo=ConversationManager(system_prompt="You are a test."),
        )
        session.prelude = coordinator.resume
        task = asyncio.get_running_loop().create_task(
            Runner(self.store).run(session, prompt, [probe, EventRecorder()])
        )
        probe.task = task
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout=30)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
            return None


async def _measure() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        rig = Rig(Path(tmp))
        await rig.open()
        probe = Probe()
        outcome = await rig.run("look at three keys", first_scripts(), probe)
        await rig.store.close()
        assert outcome is not None and outcome.event.type == "done", outcome
        return probe.count


EVENTS = asyncio.run(_measure())


async def _check_closed(rig: Rig) -> Sequence[Any]:
    turns = await rig.store.turns(rig.session_id)
    assert all(t.status != "running" for t in turns)
    calls = await rig.store.tool_calls(session_id=rig.session_id)
    assert all(c.state in TERMINAL_TOOL_STATES for c in calls), [(c.name, c.state) for c in calls]
    history = await load_history(rig.store, rig.session_id)
    messages = [*history.committed, *history.pending]
    uses = [u.id for m in messages if m.role == "assistant" for u in m.tool_uses]
    results = [r.tool_use_id for m in messages for r in m.tool_results]
    assert sorted(uses) == sorted(results) and len(set(uses)) == len(uses)
    for protocol, problems in request_problems([*messages, user_message("next")]).items():
        assert not problems, (protocol, problems)
    return messages


@pytest.mark.parametrize("at", range(EVENTS))
async def test_cut_anywhere_then_resume(tmp_path: Path, at: int) -> None:
    rig = Rig(tmp_path)
    await rig.open()
    try:
        probe = Probe(at)
        outcome = await rig.run("look at three keys", first_scripts(), probe)
        assert outcome is None, f"the cut at event {at} did not interrupt the turn"
        await _check_closed(rig)
        before = [r.payload for r in await rig.store.events_after(rig.session_id)]
        finished = {i for i, s in worker_states(before, "task_1").items() if s.finished}
        looked_before, finished_before = list(rig.looked), list(rig.finished)

        parent, workers = resume_scripts()
        outcome = await rig.run("go on", (parent, workers), Probe())
        assert outcome is not None and outcome.event.type == "done", (probe.fired, outcome)
        messages = await _check_closed(rig)
        assert not (await load_history(rig.store, rig.session_id)).pending

        # Nothing finished is redone: a finished worker is not asked again, a finished
        # tool call is not run again.
        for i in finished:
            assert not workers[i].requests, f"worker {i} had finished but ran again"
        assert rig.looked == looked_before
        results = [r for m in messages for r in m.tool_results if r.tool_use_id == "task_1"]
        if not results or not worker_states(before, "task_1"):
            return  # the cut came before any worker started: the model may call it again
        (result,) = results
        assert result.content.startswith(RESULT_HEADER), result.content
        for i in range(3):
            answer = f"answer {i}" if i in finished else f"resumed answer {i}"
            assert f"## worker {i}: look {i}\n{answer}" in result.content, (i, result.content)
        # A resumed worker saw its own finished tool output again, never an "interrupted".
        for i, provider in enumerate(workers):
            if not provider.requests:
                continue
            history = provider.requests[0].messages
            looks = [r for m in history for r in m.tool_results if r.tool_use_id == f"look_{i}"]
            if f"k{i}" in finished_before and looks:
                assert looks[0].content == f"k{i} looks fine", (i, looks[0].content)
    finally:
        await rig.store.close()


def again_scripts() -> tuple[ScriptedProvider, list[ScriptedProvider]]:
    parent = ScriptedProvider([Reply(text="Picked up."), Reply(text="Picked up again.")])
    workers = [ScriptedProvider([Reply(text=f"resumed answer {i}", chunk=4)] * 2) for i in range(3)]
    return parent, workers


async def test_cut_during_the_resume_then_resume_again(tmp_path: Path) -> None:
    """The turn that resumes the workers is itself cut at each of its events; the one after
    it still finishes every worker."""
    resume_events = 0
    for at in range(500):
        rig = Rig(tmp_path / f"cut{at}")
        rig.tmp.mkdir()
        await rig.open()
        try:
            first = await rig.run("look at three keys", first_scripts(), Probe(EVENTS // 2))
            assert first is None
            probe = Probe(at)
            parent, workers = again_scripts()
            second = await rig.run("go on", (parent, workers), probe)
            if probe.fired is None:
                assert second is not None and second.event.type == "done"
                resume_events = at
                break
            assert second is None
            await _check_closed(rig)
            third = await rig.run("go on again", (parent, workers), Probe())
            assert third is not None and third.event.type == "done", (at, probe.fired, third)
            messages = await _check_closed(rig)
            assert not (await load_history(rig.store, rig.session_id)).pending
            (result,) = [r for m in messages for r in m.tool_results if r.tool_use_id == "task_1"]
            assert result.content.startswith(RESULT_HEADER), (at, result.content)
            for i in range(3):
                assert f"## worker {i}: look {i}\n" in result.content
                assert "[worker failed" not in result.content, (at, result.content)
        finally:
            await rig.store.close()
    assert resume_events > 10  # the resume turn really was cut at each of its events
