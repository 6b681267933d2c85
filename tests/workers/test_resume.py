"""Interrupting a turn while its workers run, and the next message finishing them: finished
answers and finished tool outputs are kept, unfinished workers go on from their own pending
state, nothing finished is redone, and every request stays valid on all three protocols."""

from __future__ import annotations

import asyncio
import json

import pytest

from drover.core.events import Done, TextDelta, ToolStart
from drover.core.messages import user_message
from drover.runtime.runner import Runner, load_history
from drover.runtime.workers import RESULT_HEADER
from drover.testing.scripted import request_problems
from drover.testing.server import FakeLLMServer
from drover.tools.base import ToolContext
from drover.tools.decorator import tool
from drover.turn.state import RESUME_NOTE

from .conftest import Rig, Watcher
from .test_workers import PROMPT, body, reader_script, task_call


def cut_moment(watcher: Watcher) -> bool:
    """Worker 0 answered, worker 1's tool runs, worker 2 is streaming its answer."""
    seen = {(e.worker, type(e.event)) for e in watcher.worker_events()}
    return {(0, Done), (1, ToolStart), (2, TextDelta)} <= seen


@pytest.mark.parametrize("same_process", [True, False], ids=["same-process", "new-process"])
async def test_interrupt_during_workers_then_resume(
    rig: Rig, fake_llm: FakeLLMServer, worker_servers: list[FakeLLMServer], same_process: bool
) -> None:
    await interrupt_then_resume(rig, fake_llm, worker_servers, same_process=same_process)


@pytest.mark.parametrize("store_backend", ["postgres"])
@pytest.mark.parametrize("protocol", ["anthropic"])
async def test_interrupt_and_resume_on_postgres(
    rig: Rig, fake_llm: FakeLLMServer, worker_servers: list[FakeLLMServer]
) -> None:
    await interrupt_then_resume(rig, fake_llm, worker_servers, same_process=False)


async def interrupt_then_resume(
    rig: Rig, fake_llm: FakeLLMServer, worker_servers: list[FakeLLMServer], *, same_process: bool
) -> None:
    held: list[str] = []

    @tool
    async def hold(ctx: ToolContext, what: str) -> str:
        """Hold on to something until released."""
        held.append(what)
        await asyncio.Event().wait()
        return "released"

    rig.tools.register(hold)
    fake_llm.script(task_call(False, False, False), {"text": "All done now."})
    reader_script(worker_servers[0], 0)
    worker_servers[1].script(
        {"tool_calls": [{"name": "hold", "input": {"what": "the rope"}}]},
        {"text": "one resumed"},
    )
    worker_servers[2].script(
        {"text": "the beginning of answer two, which goes on", "stall_after": 6},
        {"text": "two resumed"},
    )
    watcher = Watcher()
    session = await rig.session()
    runner = Runner(rig.store)
    task = asyncio.get_running_loop().create_task(runner.run(session, PROMPT, [watcher]))
    await watcher.wait_for(cut_moment)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    (turn,) = await rig.store.turns(rig.session_id)
    assert turn.status == "interrupted"
    pending = (await load_history(rig.store, rig.session_id)).pending
    (cut,) = [r for m in pending for r in m.tool_results if "worker 0" in r.content]
    assert cut.is_error and not cut.content.startswith(RESULT_HEADER)
    assert "file 0 says hello" in cut.content  # a finished worker's answer is kept
    calls = {c.name: c for c in await rig.store.tool_calls(session_id=rig.session_id)}
    assert calls["read_file"].state == "output-available"
    assert calls["hold"].state == "interrupted"

    if not same_process:
        session = await rig.session()
    watcher = Watcher()
    outcome = await Runner(rig.store).run(session, "go on", [watcher])
    assert isinstance(outcome.event, Done) and outcome.event.text == "All done now."

    # Nothing finished is redone; the unfinished workers go on from where they were.
    assert len(worker_servers[0].requests) == 2
    assert held == ["the rope"]
    assert len(worker_servers[1].requests) == 2 and "the rope" in body(worker_servers[1], 1)
    resumed_two = body(worker_servers[2], 1)
    assert len(worker_servers[2].requests) == 2
    assert "the beginning of" in resumed_two and json.dumps(RESUME_NOTE)[1:-1] in resumed_two
    assert {e.worker for e in watcher.worker_events()} == {1, 2}
    # The parent's next request carries the whole result in place of the interrupted one.
    final = body(fake_llm, 1)
    for answer in ("file 0 says hello", "one resumed", "two resumed"):
        assert answer in final
    assert "Output before it was cut off" not in final

    # The journal says the same; a third turn would not resume anything again.
    history = await load_history(rig.store, rig.session_id)
    assert not history.pending
    results = [r for m in history.committed for r in m.tool_results if "worker 0" in r.content]
    assert len(results) == 1 and results[0].content.startswith(RESULT_HEADER)
    assert "two resumed" in results[0].content
    memory = [r for m in session.convo.messages() for r in m.tool_results]
    assert [r for r in memory if "worker 0" in r.content] == results
    for protocol, problems in request_problems([*history.committed, user_message("n")]).items():
        assert not problems, (protocol, problems)
