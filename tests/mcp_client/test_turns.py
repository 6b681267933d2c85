"""MCP tools in real turns: the reference servers (npm), started by the tests, over stdio and
streamable HTTP, through the fake LLM server speaking each wire protocol (its validators refuse
what the real APIs refuse, tools included)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from support.mcp_servers import alive, everything, everything_http, filesystem, read_pid
from support.tool_rules import PROTOCOLS

from drover.core.events import ToolProgress, ToolStateChanged
from drover.testing import FakeLLMServer

from .conftest import call, make_agent

pytestmark = pytest.mark.usefixtures("node")

SUM = "mcp__everything__get-sum"
LONG = "mcp__everything__trigger-long-running-operation"


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_tool_using_turn(
    fake_llm: FakeLLMServer, tmp_path: Path, protocol: str, transport: str
) -> None:
    fake_llm.script(
        {"tool_calls": [call(SUM, a=2, b=3)]},
        {"text": "It is 5."},
    )
    marks = {"readOnly": ["get-sum"]}  # (it runs without asking: nobody answers here)
    with contextlib.ExitStack() as stack:
        if transport == "stdio":
            server = everything(**marks)
        else:
            http = stack.enter_context(everything_http())
            server = {"type": "http", "url": http.url, **marks}
        async with make_agent(
            fake_llm, tmp_path, {"everything": server}, protocol=protocol
        ) as agent:
            result = await agent.run("what is 2 + 3?")
    assert (result.status, result.text) == ("completed", "It is 5.")
    first, second = fake_llm.requests
    offered = json.dumps(first.body["tools"])
    assert SUM in offered and "mcp__everything__echo" in offered
    assert "The sum of 2 and 3 is 5." in json.dumps(second.body)


async def test_progress_reaches_a_consumer_and_is_not_stored(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {"tool_calls": [call(LONG, duration=0.6, steps=3)]},
        {"text": "Finished."},
    )
    servers = {"everything": everything(readOnly=True)}
    progress: list[ToolProgress] = []
    async with make_agent(fake_llm, tmp_path, servers) as agent:
        async with agent.run_stream("run it") as stream:
            async for event in stream:
                if isinstance(event, ToolProgress):
                    progress.append(event)
        assert stream.result.status == "completed"
        logged = await agent.store.events_after(stream.result.session_id)
    assert progress, "no progress event reached the stream"
    assert all(p.name == LONG and p.total == 3 for p in progress)
    values = [p.progress for p in progress]
    assert values == sorted(set(values)) and values[-1] <= 3
    assert {r.payload.get("type") for r in logged} >= {"tool_state", "done"}
    assert "tool_progress" not in {r.payload.get("type") for r in logged}


@pytest.mark.parametrize(
    ("marks", "asked", "written"),
    [
        ({"readOnly": ["read_text_file", "list_directory"]}, ["mcp__files__write_file"], False),
        ({"readOnly": ["read_text_file"], "trust": ["write_file"]}, [], True),
    ],
    ids=["write-asks", "write-trusted"],
)
async def test_filesystem_server_permissions(
    fake_llm: FakeLLMServer,
    tmp_path: Path,
    marks: dict[str, list[str]],
    asked: list[str],
    written: bool,
) -> None:
    root = tmp_path / "files"
    root.mkdir()
    (root / "hello.txt").write_text("hello from the file\n")
    fake_llm.script(
        {
            "tool_calls": [
                call("mcp__files__read_text_file", path=str(root / "hello.txt")),
                call("mcp__files__write_file", path=str(root / "new.txt"), content="new"),
            ]
        },
        {"text": "Done."},
    )
    questions: list[str] = []

    def deny(request: object) -> str:
        questions.append(getattr(request, "tool_name", "?"))
        return "deny"

    servers = {"files": filesystem(root, **marks)}
    async with make_agent(fake_llm, tmp_path, servers, on_permission=deny) as agent:
        result = await agent.run("read and write")
        calls = await agent.store.tool_calls(session_id=result.session_id)
    assert result.status == "completed"
    assert questions == asked
    states = {c.name: (c.state, c.output or "") for c in calls}
    assert states["mcp__files__read_text_file"][0] == "output-available"
    assert "hello from the file" in states["mcp__files__read_text_file"][1]
    assert states["mcp__files__write_file"][0] == ("output-available" if written else "denied")
    assert (root / "new.txt").exists() == written


async def test_a_server_that_does_not_start_leaves_the_others(
    fake_llm: FakeLLMServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.script({"text": "Hello."})
    servers = {
        "broken": {"command": str(tmp_path / "no-such-server")},
        "everything": everything(),
    }
    async with make_agent(fake_llm, tmp_path, servers) as agent:
        assert agent.mcp is not None
        states = {s.name: s for s in agent.mcp.states()}
        result = await agent.run("hi")
    assert result.status == "completed"
    assert states["broken"].status == "failed" and "no-such-server" in states["broken"].detail
    assert states["everything"].status == "ready" and states["everything"].tools
    offered = json.dumps(fake_llm.requests[0].body["tools"])
    assert "mcp__everything__echo" in offered and "mcp__broken" not in offered
    assert "MCP server 'broken' could not start" in caplog.text


async def test_the_servers_stop_when_the_agent_closes(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    async with make_agent(fake_llm, tmp_path, {"everything": everything(pidfile=pidfile)}) as agent:
        pid = read_pid(pidfile)
        assert alive(pid)
        servers = agent.mcp
        assert servers is not None
    assert not alive(pid)
    assert [s.status for s in servers.states()] == ["stopped"]


async def test_tool_state_of_an_mcp_call_is_journaled(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"tool_calls": [call("mcp__everything__echo", message="hi")]}, {"text": "ok"})
    states: list[str] = []
    async with make_agent(
        fake_llm, tmp_path, {"everything": everything(readOnly=["echo"])}
    ) as agent:
        async with agent.run_stream("echo") as stream:
            async for event in stream:
                if isinstance(event, ToolStateChanged):
                    states.append(event.state)
        (stored,) = await agent.store.tool_calls(session_id=stream.result.session_id)
    assert states == ["input-streaming", "input-available", "running", "output-available"]
    assert (stored.state, stored.output, stored.read_only) == ("output-available", "Echo: hi", True)
