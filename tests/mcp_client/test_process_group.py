"""What an MCP server starts ends with it: a server that leaves a child behind when it exits (as
language servers, browsers and workers do) has that child ended too — when the agent closes,
and when the server dies and is restarted. Checked from outside, by pid, in ``/proc``."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from support.mcp_servers import wait_for

from drover.testing import FakeLLMServer

from .conftest import call, make_agent

RAW = Path(__file__).resolve().parents[1] / "support" / "raw_mcp.py"
WHERE = "mcp__raw__where"


def raw_server(pids: Path) -> dict[str, Any]:
    """A server that starts a sleeping child (in its group, holding its stdout) and writes
    ``SERVER_PID CHILD_PID`` to ``pids``."""
    return {
        "command": sys.executable,
        "args": [str(RAW)],
        "env": {"RAW_MCP": json.dumps({"grandchild": str(pids)})},
        "trust": True,
    }


def group_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that still run (an unreaped zombie runs nothing)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry))
    return members


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def read_pids(path: Path) -> tuple[int, int]:
    text = wait_for(lambda: path.is_file() and path.read_text().strip(), f"{path}")
    server, child = (int(p) for p in text.split())
    return server, child


async def test_the_servers_group_ends_when_the_agent_closes(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    fake_llm.script({"tool_calls": [call(WHERE)]}, {"text": "done"})
    async with make_agent(fake_llm, tmp_path, {"raw": raw_server(pids)}) as agent:
        result = await agent.run("go")
        assert result.status == "completed"
        server, child = read_pids(pids)
        assert running(child) and set(group_members(server)) == {server, child}
    # The server exits as soon as its stdin closes; what it started is not left running.
    assert group_members(server) == []
    assert not running(child)


async def test_a_dead_servers_group_ends_before_it_is_started_again(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    fake_llm.script(
        {"tool_calls": [call(WHERE)]},
        {"tool_calls": [call(WHERE)]},
        {"text": "done"},
    )
    async with make_agent(fake_llm, tmp_path, {"raw": raw_server(pids)}) as agent:
        server, child = read_pids(pids)
        os.kill(server, signal.SIGKILL)  # (this test's own server)
        pids.unlink()
        result = await agent.run("go")  # the first call finds it dead; the second restarts it
        assert result.status == "completed"
        # The dead server's child was ended with its group when the connection was let go.
        wait_for(lambda: not running(child), "the dead server's child to end")
        assert group_members(server) == []
        restarted, second_child = read_pids(pids)
    assert group_members(restarted) == [] and not running(second_child)
