"""An MCP call can fail, hang or be interrupted at any moment without losing the turn: a server
killed mid-call, one that cannot start again, one that hangs, a user who stops the turn."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest
from support.mcp_servers import (
    DEADLINE,
    REFUSAL,
    alive,
    everything,
    everything_http,
    kill_server,
    read_pid,
    recorded,
    until,
    wait_for,
)

from drover.core.events import ToolProgress, ToolStateChanged
from drover.testing import FakeLLMServer

from .conftest import call, make_agent

pytestmark = pytest.mark.usefixtures("node")

ECHO = "mcp__everything__echo"
#: A call that runs for ``duration`` seconds and reports its progress after each of ``steps``
#: equal steps (the tests that act on its first report make them 0.1 s).
LONG = "mcp__everything__trigger-long-running-operation"


async def _run_killing_on_progress(
    fake_llm: FakeLLMServer, tmp_path: Path, server: dict[str, object], pidfile: Path
) -> tuple[str, dict[str, ToolStateChanged], int]:
    """A turn whose first call the test kills at its first progress report, and whose second
    call comes after; ``(status, final state by call id, pid killed)``."""
    fake_llm.script(
        {"tool_calls": [call(LONG, duration=30, steps=300)]},
        {"tool_calls": [call(ECHO, message="again")]},
        {"text": "Went on."},
    )
    finals: dict[str, ToolStateChanged] = {}
    killed = 0
    async with make_agent(
        fake_llm, tmp_path, {"everything": server}, permission_mode="allow"
    ) as agent:
        async with agent.run_stream("go") as stream:
            async for event in stream:
                if isinstance(event, ToolProgress) and not killed:
                    killed = kill_server(pidfile)
                if isinstance(event, ToolStateChanged) and event.output is not None:
                    finals[event.call_id] = event
        assert agent.mcp is not None
        (connection,) = agent.mcp.connections
        starts = connection.starts
    assert killed
    return stream.result.status, finals, starts


async def test_a_server_killed_mid_call_fails_that_call_and_is_restarted(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    status, finals, starts = await _run_killing_on_progress(
        fake_llm, tmp_path, everything(pidfile=pidfile), pidfile
    )
    assert status == "completed"
    killed_call, echo = (finals[e] for e in sorted(finals))
    assert killed_call.state == "output-error"
    assert "failed during the call" in (killed_call.output or "")
    assert "outcome is unknown" in (killed_call.output or "")
    assert (echo.state, echo.output) == ("output-available", "Echo: again")
    assert starts == 2
    # What the model was told, in the request after the kill: the error, then the echo.
    later = json.dumps([r.body for r in fake_llm.requests[1:]])
    assert "restarted on its next use" in later and "Echo: again" in later


async def test_a_server_that_cannot_start_again_is_an_error_result(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    status, finals, _starts = await _run_killing_on_progress(
        fake_llm, tmp_path, everything(pidfile=pidfile, once=True), pidfile
    )
    assert status == "completed"
    _killed_call, echo = (finals[e] for e in sorted(finals))
    assert echo.state == "output-error"
    assert "MCP server 'everything' could not start" in (echo.output or "")
    assert REFUSAL in (echo.output or "")  # the end of its log, quoted


@pytest.mark.parametrize("read_only", [False, True], ids=["side-effecting", "read-only"])
async def test_an_interrupted_call_is_cancelled_on_the_server(
    fake_llm: FakeLLMServer, tmp_path: Path, read_only: bool
) -> None:
    record = tmp_path / "sent.jsonl"
    fake_llm.script({"tool_calls": [call(LONG, duration=60, steps=600)]})
    server = everything(record=record, readOnly=read_only)
    async with make_agent(
        fake_llm, tmp_path, {"everything": server}, permission_mode="allow"
    ) as agent:
        async with agent.run_stream("go") as stream:
            async for event in stream:
                if isinstance(event, ToolProgress):
                    break  # leaving the block interrupts the turn
        result = stream.result
        (stored,) = await agent.store.tool_calls(session_id=result.session_id)
    assert result.status == "interrupted"
    assert stored.state == "interrupted"
    assert stored.outcome_unknown is not read_only
    (request_id,) = [
        m["id"]
        for m in recorded(record)
        if m.get("method") == "tools/call" and m["params"]["name"] == LONG.split("__")[-1]
    ]
    cancelled = wait_for(
        lambda: [m for m in recorded(record) if m.get("method") == "notifications/cancelled"],
        "notifications/cancelled",
    )
    assert [m["params"]["requestId"] for m in cancelled] == [request_id]


async def test_a_hanging_call_times_out_is_cancelled_and_the_server_restarted(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    record = tmp_path / "sent.jsonl"
    # One step of 30 s: no answer and no progress for longer than the timeout of 1 s.
    fake_llm.script(
        {"tool_calls": [call(LONG, duration=30, steps=1)]},
        {"tool_calls": [call(ECHO, message="after")]},
        {"text": "Went on."},
    )
    server = everything(record=record, timeout=1)
    async with make_agent(
        fake_llm, tmp_path, {"everything": server}, permission_mode="allow"
    ) as agent:
        result = await agent.run("go")
        calls = await agent.store.tool_calls(session_id=result.session_id)
        assert agent.mcp is not None
        (connection,) = agent.mcp.connections
        assert connection.starts == 2
    assert result.status == "completed"
    hung, echo = calls
    assert hung.state == "output-error"
    assert "did not answer the call of trigger-long-running-operation within 1 s" in (
        hung.output or ""
    )
    assert (echo.state, echo.output) == ("output-available", "Echo: after")
    assert any(m.get("method") == "notifications/cancelled" for m in recorded(record))


async def test_secrets_from_the_environment_never_reach_the_journal_or_the_logs(
    fake_llm: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cr3t-value-from-the-env-4815162342"
    monkeypatch.setenv("DROVER_TEST_MCP_SECRET", secret)
    fake_llm.script({"tool_calls": [call("mcp__everything__get-env")]}, {"text": "Seen."})
    server = everything(
        env={"SERVICE_TOKEN": "${DROVER_TEST_MCP_SECRET}"},
        args=[*everything()["args"], "--flag=${DROVER_TEST_MCP_SECRET}"],
        readOnly=True,
    )
    async with make_agent(fake_llm, tmp_path, {"everything": server}) as agent:
        result = await agent.run("show the environment")
        (stored,) = await agent.store.tool_calls(session_id=result.session_id)
    # The server printed its environment; the model saw it, the journal has it redacted.
    assert secret in json.dumps(fake_llm.requests[1].body)
    assert "SERVICE_TOKEN" in (stored.output or "") and "[REDACTED]" in (stored.output or "")
    files = written(tmp_path)
    assert "journal.db" in files and "mcp-logs/everything.log" in files
    for name, data in files.items():
        assert secret.encode() not in data, name
    assert b"--flag=${DROVER_TEST_MCP_SECRET}" in files["mcp-logs/everything.log"]  # as written


def written(tmp_path: Path) -> dict[str, bytes]:
    """The journal's files (WAL included) and the servers' logs, by name."""
    paths = [*tmp_path.glob("journal.db*"), *(tmp_path / "mcp-logs").iterdir()]
    return {str(p.relative_to(tmp_path)): p.read_bytes() for p in paths}


async def test_a_server_that_died_between_calls_is_restarted_by_the_next(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    fake_llm.script(
        {"tool_calls": [call(ECHO, message="one")]},
        {"text": "First."},
        {"tool_calls": [call(ECHO, message="two")]},
        {"text": "Second."},
    )
    servers = {"everything": everything(pidfile=pidfile, readOnly=True)}
    async with make_agent(fake_llm, tmp_path, servers) as agent:
        first = await agent.run("echo one")
        assert agent.mcp is not None
        (connection,) = agent.mcp.connections
        killed = kill_server(pidfile)
        await until(lambda: connection.status == "closed", "the connection to notice the exit")
        second = await agent.run("echo two", session=first.session_id)
        calls = await agent.store.tool_calls(session_id=first.session_id)
    assert (first.status, second.status) == ("completed", "completed")
    # The server was gone before the call was sent: nothing to report, it simply came back.
    assert [c.output for c in calls] == ["Echo: one", "Echo: two"]
    assert read_pid(pidfile) != killed
    assert connection.starts == 2


async def test_a_server_that_never_answers_fails_its_start_within_the_timeout(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"text": "Hello."})
    pidfile = tmp_path / "pid"
    # A program that reads nothing and says nothing: the MCP handshake never completes.
    silent = {
        "command": "sh",
        "args": ["-c", 'echo $$ > "$0"; exec sleep 300', str(pidfile)],
        "startupTimeout": 1,
    }
    async with (
        asyncio.timeout(DEADLINE),  # (the failure bound of a start that would never end)
        make_agent(fake_llm, tmp_path, {"silent": silent}) as agent,
    ):
        assert agent.mcp is not None
        (state,) = agent.mcp.states()
        result = await agent.run("hi")
    assert result.status == "completed"
    assert (state.status, state.detail) == ("failed", "did not start within 1 s")
    assert not alive(read_pid(pidfile))  # the start was abandoned: the process is gone


async def test_an_http_server_that_dies_mid_call_and_comes_back(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {"tool_calls": [call(LONG, duration=30, steps=300)]},
        {"tool_calls": [call(ECHO, message="down")]},
        {"text": "It is down."},
        {"tool_calls": [call(ECHO, message="up")]},
        {"text": "It is back."},
    )
    with everything_http() as http:
        server = {"type": "http", "url": http.url, "headers": {"X-Drover-Test": "1"}}
        async with make_agent(
            fake_llm, tmp_path, {"everything": server}, permission_mode="allow"
        ) as agent:
            async with agent.run_stream("go") as stream:
                async for event in stream:
                    if isinstance(event, ToolProgress) and http.running:
                        http.stop(signal.SIGKILL)
            http.start()
            again = await agent.run("once more", session=stream.result.session_id)
            calls = await agent.store.tool_calls(session_id=again.session_id)
    assert (stream.result.status, again.status) == ("completed", "completed")
    killed, down, up = (c.output or "" for c in calls)
    assert "failed during the call" in killed
    assert "could not start" in down
    assert up == "Echo: up"
