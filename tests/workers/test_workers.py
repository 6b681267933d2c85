"""The task tool through the real SDKs on all three protocols: workers in parallel with tools,
relabelled events, a failing worker, and what the journal keeps of them."""

from __future__ import annotations

import json
from typing import Any

from drover.core.events import Done, ToolDone, ToolStart, event_to_dict
from drover.core.messages import user_message
from drover.runtime.runner import Runner, load_history
from drover.runtime.workers import RESULT_HEADER
from drover.testing.scripted import request_problems
from drover.testing.server import FakeLLMServer

from .conftest import Rig, Watcher, marker

PROMPT = "Read the three files with workers."


def task_call(*fresh: bool) -> dict[str, Any]:
    tasks = [
        {"description": f"read {i}", "prompt": f"{marker(i)} read f{i}.txt", "fresh": f}
        for i, f in enumerate(fresh)
    ]
    return {"tool_calls": [{"name": "task", "input": {"tasks": tasks}}]}


def reader_script(server: FakeLLMServer, i: int) -> None:
    server.script(
        {"tool_calls": [{"name": "read_file", "input": {"path": f"f{i}.txt"}}]},
        {"text": f"file {i} says hello"},
    )


def body(server: FakeLLMServer, n: int) -> str:
    return json.dumps(server.requests[n].body)


def tool_names(server: FakeLLMServer, n: int) -> list[str]:
    tools = server.requests[n].body.get("tools", [])
    return [t.get("name") or t.get("function", {}).get("name") for t in tools]


def tool_pairs(watcher: Watcher) -> tuple[list[int], list[int]]:
    starts = [e.event.call_index for e in watcher.worker_events() if isinstance(e.event, ToolStart)]
    dones = [e.event.call_index for e in watcher.worker_events() if isinstance(e.event, ToolDone)]
    return starts, dones


async def test_three_workers_run_in_parallel_and_answer_only(
    rig: Rig, fake_llm: FakeLLMServer, worker_servers: list[FakeLLMServer]
) -> None:
    fake_llm.script(task_call(False, False, True), {"text": "All three read."})
    for i, server in enumerate(worker_servers):
        reader_script(server, i)
    watcher = Watcher()
    session = await rig.session()
    outcome = await Runner(rig.store).run(session, PROMPT, [watcher])

    assert isinstance(outcome.event, Done) and outcome.event.text == "All three read."
    # The parent sees every worker's final answer, never a worker's transcript.
    final = body(fake_llm, 1)
    for i in range(3):
        assert f"file {i} says hello" in final
        assert f"content of file {i}" not in final
        assert len(worker_servers[i].requests) == 2
        assert f"content of file {i}" in body(worker_servers[i], 1)
    # One level deep: workers have the parent's tools but not the task tool.
    assert "task" in tool_names(fake_llm, 0)
    assert set(tool_names(worker_servers[0], 0)) == set(tool_names(fake_llm, 0)) - {"task"}
    # Seeded from the parent's conversation, or fresh when asked.
    assert PROMPT in body(worker_servers[0], 0)
    assert PROMPT not in body(worker_servers[2], 0)
    # Relabelled indices: unique across workers, every start matched by its done.
    starts, dones = tool_pairs(watcher)
    assert sorted(starts) == [0, 100, 200] and sorted(dones) == [0, 100, 200]
    assert {e.worker for e in watcher.worker_events()} == {0, 1, 2}
    # A worker's end is never taken for the parent's: one terminal event outside workers.
    assert [e.type for e in watcher.events if e.type in ("done", "incomplete", "error")] == ["done"]
    # Usage of every worker is summed into the turn's.
    worker_out = sum(
        e.event.usage.output_tokens for e in watcher.worker_events() if isinstance(e.event, Done)
    )
    assert worker_out > 0 and outcome.event.usage.output_tokens > worker_out

    # The journal: worker calls under the parent's turn, with relabelled indices, finished.
    calls = await rig.store.tool_calls(session_id=rig.session_id)
    worker_calls = sorted((c.call_index, c.state) for c in calls if c.name == "read_file")
    assert worker_calls == [
        (0, "output-available"),
        (100, "output-available"),
        (200, "output-available"),
    ]
    events = await rig.store.events_after(rig.session_id)
    assert sum(1 for e in events if e.type == "done") == 1
    assert {e.payload["worker"] for e in events if e.type == "worker"} == {0, 1, 2}
    history = await load_history(rig.store, rig.session_id)
    (result,) = [r for m in history.committed for r in m.tool_results if "says" in r.content]
    assert result.content.startswith(RESULT_HEADER) and not result.is_error
    for protocol, problems in request_problems([*history.committed, user_message("n")]).items():
        assert not problems, (protocol, problems)


async def test_two_workers_stream_json_shape(
    rig: Rig, fake_llm: FakeLLMServer, worker_servers: list[FakeLLMServer]
) -> None:
    fake_llm.script(task_call(False, False), {"text": "Both read."})
    for i in range(2):
        reader_script(worker_servers[i], i)
    watcher = Watcher()
    outcome = await Runner(rig.store).run(await rig.session(), PROMPT, [watcher])
    assert isinstance(outcome.event, Done)
    starts, dones = tool_pairs(watcher)
    assert sorted(starts) == sorted(dones) == [0, 100]
    lines = [event_to_dict(e) for e in watcher.worker_events()]
    assert all(d["type"] == "worker" and d["parent_call_id"] for d in lines), lines[:3]
    assert {d["event"]["call_index"] for d in lines if d["event"]["type"] == "tool_start"} == {
        0,
        100,
    }


async def test_a_failing_worker_does_not_stop_its_siblings(
    rig: Rig, fake_llm: FakeLLMServer, worker_servers: list[FakeLLMServer]
) -> None:
    fake_llm.script(task_call(False, False, False), {"text": "Two of three."})
    reader_script(worker_servers[0], 0)
    worker_servers[1].script(
        {"http_error": {"status": 400, "type": "invalid_request_error", "message": "bad"}}
    )
    reader_script(worker_servers[2], 2)
    watcher = Watcher()
    outcome = await Runner(rig.store).run(await rig.session(), PROMPT, [watcher])
    assert isinstance(outcome.event, Done)
    history = await load_history(rig.store, rig.session_id)
    (result,) = [r for m in history.committed for r in m.tool_results if "worker 1" in r.content]
    assert "file 0 says hello" in result.content and "file 2 says hello" in result.content
    assert "[worker failed (error:" in result.content and "(1 failed)" in result.content
    assert not result.is_error  # some workers answered


async def test_a_worker_stops_at_its_own_turn_limit(
    rig: Rig, fake_llm: FakeLLMServer, worker_servers: list[FakeLLMServer]
) -> None:
    fake_llm.script(task_call(False, False), {"text": "One of two."})
    reader_script(worker_servers[0], 0)
    # The rig's workers may make 4 model calls; this one would go on reading forever.
    looping = {"tool_calls": [{"name": "read_file", "input": {"path": "f1.txt"}}]}
    worker_servers[1].script(*[looping] * 4)
    outcome = await Runner(rig.store).run(await rig.session(), PROMPT, [Watcher()])
    assert isinstance(outcome.event, Done)
    assert len(worker_servers[1].requests) == 4
    history = await load_history(rig.store, rig.session_id)
    (result,) = [r for m in history.committed for r in m.tool_results if "worker 1" in r.content]
    assert "[worker failed (max_turns: turn limit reached (4 model calls))]" in result.content
    assert "file 0 says hello" in result.content
