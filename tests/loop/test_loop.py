"""The agent loop through each real SDK against the fake server (seed 002 §4)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from drover.core.events import (
    AssistantMessage,
    Done,
    Error,
    Incomplete,
    PermissionRequest,
    Retry,
    TextDelta,
    ToolDone,
    ToolStart,
    ToolStateChanged,
    UsageReport,
)
from drover.core.messages import TextBlock, ToolResultBlock
from drover.providers.base import Provider
from drover.testing.server import FakeLLMServer
from drover.tools import ToolContext, ToolRegistry, tool
from drover.turn.loop import LoopSettings
from drover.turn.permissions import PermissionPolicy

from .conftest import Answering, new_session

LONG_TEXT = (
    "The answer is forty-two, because the question was never quite what anyone thought it "
    "was, and the machine that computed it took seven and a half million years to say so."
)


def _body_text(server: FakeLLMServer, index: int) -> str:
    return json.dumps(server.requests[index].body)


async def test_happy_path_streams_text_and_finishes(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {"text": "Hello there, friend.", "usage": {"input_tokens": 9, "output_tokens": 4}}
    )
    session = new_session(provider, tmp_path)
    sink = Answering()
    outcome = await session.run("hello", sink)

    assert isinstance(outcome.event, Done)
    assert outcome.event.text == "Hello there, friend."
    deltas = [e.text for e in sink.events if isinstance(e, TextDelta)]
    assert len(deltas) > 1 and "".join(deltas) == "Hello there, friend."
    usage = [e for e in sink.events if isinstance(e, UsageReport)]
    assert usage[-1].total_input == 9 and usage[-1].total_output == 4
    assert [m.role for m in session.convo.messages()] == ["user", "assistant"]
    assert session.pending == ()
    assert sink.events[-1] == outcome.event


async def test_tool_call_runs_and_result_is_sent_back(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("file contents here")
    fake_llm.script(
        {
            "text": "Let me read it.",
            "tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}],
        },
        {"text": "It says: file contents here"},
    )
    session = new_session(provider, tmp_path)
    sink = Answering()
    outcome = await session.run("what is in a.txt?", sink)

    assert isinstance(outcome.event, Done)
    kinds = [e.type for e in sink.events]
    assert kinds.index("tool_start") < kinds.index("tool_done") < kinds.index("done")
    start = next(e for e in sink.events if isinstance(e, ToolStart))
    assert start.input_summary == "read_file: a.txt" and start.call_index == 0
    states = [e.state for e in sink.events if isinstance(e, ToolStateChanged)]
    assert states == ["input-streaming", "input-available", "running", "output-available"]
    history = session.convo.messages()
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[1].tool_uses[0].name == "read_file"
    assert history[2].tool_results[0].content == "file contents here"
    assert "file contents here" in _body_text(fake_llm, 1)


async def test_tool_error_becomes_error_result_and_loop_continues(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {"tool_calls": [{"name": "read_file", "input": {"path": "missing.txt"}}]},
        {"text": "That file does not exist."},
    )
    session = new_session(provider, tmp_path)
    sink = Answering()
    outcome = await session.run("read missing.txt", sink)

    assert isinstance(outcome.event, Done)
    done = next(e for e in sink.events if isinstance(e, ToolDone))
    assert done.is_error
    result = session.convo.messages()[2].tool_results[0]
    assert result.is_error
    assert outcome.event.text == "That file does not exist."


async def test_unknown_tool_and_bad_input_are_error_results(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {
            "tool_calls": [
                {"name": "teleport", "input": {"to": "mars"}},
                {"name": "read_file", "raw_input": '{"path": "a'},
            ]
        },
        {"text": "ok"},
    )
    session = new_session(provider, tmp_path)
    outcome = await session.run("go", Answering())
    assert isinstance(outcome.event, Done)
    results = session.convo.messages()[2].tool_results
    assert results[0].is_error and "Unknown tool 'teleport'" in results[0].content
    assert results[1].is_error and "Invalid tool input" in results[1].content


async def test_permission_denied_is_reported_and_loop_continues(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {"tool_calls": [{"name": "write_file", "input": {"path": "x.txt", "content": "x"}}]},
        {"text": "Understood, I will not write it."},
    )
    session = new_session(provider, tmp_path, policy=PermissionPolicy("ask"))
    sink = Answering("deny")
    outcome = await session.run("write x", sink)

    assert isinstance(outcome.event, Done)
    requests = [e for e in sink.events if isinstance(e, PermissionRequest)]
    assert len(requests) == 1 and requests[0].tool_name == "write_file"
    result = session.convo.messages()[2].tool_results[0]
    assert result.is_error and "denied" in result.content
    assert not (tmp_path / "x.txt").exists()
    assert any(isinstance(e, ToolStateChanged) and e.state == "denied" for e in sink.events)


async def test_permission_always_is_remembered(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    write = {"name": "write_file", "input": {"path": "x.txt", "content": "x"}}
    fake_llm.script({"tool_calls": [write]}, {"tool_calls": [write]}, {"text": "done"})
    session = new_session(provider, tmp_path, policy=PermissionPolicy("ask"))
    sink = Answering("always")
    outcome = await session.run("write twice", sink)
    assert isinstance(outcome.event, Done)
    assert len([e for e in sink.events if isinstance(e, PermissionRequest)]) == 1
    assert (tmp_path / "x.txt").read_text() == "x"


def _overlap_tools() -> tuple[ToolRegistry, dict[str, asyncio.Event]]:
    started = {"first": asyncio.Event(), "second": asyncio.Event()}
    order: list[str] = []

    @tool(read_only=True)
    async def probe(ctx: ToolContext, name: str, other: str) -> str:
        """Start, then wait until the other probe has started too."""
        started[name].set()
        # Only possible if the two calls run at the same time.
        await asyncio.wait_for(started[other].wait(), timeout=10)
        if name == "first":
            # Finish last, so call order and completion order differ.
            await asyncio.wait_for(_finished_second.wait(), timeout=10)
        order.append(name)
        if name == "second":
            _finished_second.set()
        return f"{name} done"

    _finished_second = asyncio.Event()
    registry = ToolRegistry()
    registry.register(probe)
    return registry, started


async def test_parallel_tool_calls_overlap_and_results_keep_call_order(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {
            "tool_calls": [
                {"name": "probe", "input": {"name": "first", "other": "second"}},
                {"name": "probe", "input": {"name": "second", "other": "first"}},
            ]
        },
        {"text": "both done"},
    )
    tools, _ = _overlap_tools()
    session = new_session(provider, tmp_path, tools=tools)
    sink = Answering()
    outcome = await session.run("probe twice", sink)

    assert isinstance(outcome.event, Done)
    dones = [e for e in sink.events if isinstance(e, ToolDone)]
    assert [d.call_index for d in dones] == [1, 0]  # completion order
    results = session.convo.messages()[2].tool_results
    assert [r.content for r in results] == ["first done", "second done"]  # call order
    calls = session.convo.messages()[1].tool_uses
    assert [r.tool_use_id for r in results] == [c.id for c in calls]


async def test_turn_limit_is_a_resumable_pause(
    unchained_provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    provider = unchained_provider
    glob = {"name": "glob", "input": {"pattern": "*"}}
    fake_llm.script({"tool_calls": [glob]}, {"tool_calls": [glob]}, {"text": "finished"})
    session = new_session(provider, tmp_path, settings=LoopSettings(max_turns=2))
    sink = Answering()
    outcome = await session.run("look around", sink)

    assert isinstance(outcome.event, Incomplete) and outcome.event.reason == "max_turns"
    assert session.convo.messages() == ()
    assert len(session.pending) == 5  # user, 2 × (call, result)

    resumed = await session.resume(Answering())
    assert isinstance(resumed.event, Done) and resumed.event.text == "finished"
    assert session.pending == ()
    assert len(session.convo.messages()) == 6
    # The resumed request carried both tool results and no duplicate user message.
    assert _body_text(fake_llm, 2).count("look around") == 1


async def test_mid_stream_error_is_retried_and_partial_discarded(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"text": LONG_TEXT, "error_after": 6}, {"text": "Whole answer."})
    session = new_session(provider, tmp_path)
    sink = Answering()
    outcome = await session.run("answer", sink)

    assert isinstance(outcome.event, Done) and outcome.event.text == "Whole answer."
    retries = [e for e in sink.events if isinstance(e, Retry)]
    assert len(retries) == 1 and retries[0].discard_partial
    assistant = [e for e in sink.events if isinstance(e, AssistantMessage)]
    assert len(assistant) == 1  # the broken attempt is not kept


async def test_error_before_anything_accumulated_is_error(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"http_error": {"status": 400, "message": "bad request"}})
    session = new_session(provider, tmp_path)
    outcome = await session.run("hi", Answering())
    assert isinstance(outcome.event, Error) and outcome.event.reason == "error"
    assert "400" in outcome.event.error


async def test_error_after_tools_ran_is_incomplete_and_keeps_outputs(
    unchained_provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    provider = unchained_provider
    (tmp_path / "a.txt").write_text("AAA")
    fake_llm.script(
        {"tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}]},
        {"http_error": {"status": 400, "message": "nope"}},
        {"text": "Resumed: a.txt holds AAA."},
    )
    session = new_session(provider, tmp_path)
    outcome = await session.run("read a", Answering())
    assert isinstance(outcome.event, Incomplete) and outcome.event.reason == "error"
    pending = session.pending
    assert pending[-1].tool_results == (
        ToolResultBlock(tool_use_id=pending[1].tool_uses[0].id, content="AAA"),
    )

    outcome = await session.run("continue", Answering())
    assert isinstance(outcome.event, Done)
    body = _body_text(fake_llm, 2)
    assert "AAA" in body and body.index("read a") < body.index("AAA") < body.index("continue")


async def test_empty_response_mid_loop_is_incomplete(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]}, {"empty": True})
    session = new_session(provider, tmp_path)
    outcome = await session.run("look", Answering())
    assert isinstance(outcome.event, Incomplete) and outcome.event.reason == "empty_response"


async def test_stream_cut_mid_text_keeps_partial_text(
    provider: Provider, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    broken = {"text": LONG_TEXT, "error_after": 6}
    fake_llm.script(broken, broken, broken)
    session = new_session(provider, tmp_path)
    sink = Answering()
    outcome = await session.run("why?", sink)
    assert isinstance(outcome.event, Incomplete) and outcome.event.reason == "error"
    partial = session.pending[-1]
    assert partial.role == "assistant"
    block = partial.content[0]
    assert isinstance(block, TextBlock) and block.partial and block.text
    assert LONG_TEXT.startswith(block.text) and len(block.text) < len(LONG_TEXT)
    assert outcome.event.usage.partial
