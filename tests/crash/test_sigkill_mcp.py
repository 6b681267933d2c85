"""A real ``drover -p`` killed with SIGKILL in the middle of an MCP call (server-everything's
long-running operation, over stdio): a new process recovers the turn ``interrupted`` and the
call ``outcome_unknown`` — unless the configuration marks the tool read-only — and the
session's next request tells the model so."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest
from support.mcp_servers import EVERYTHING, everything, require_node, write_config

from drover.core.events import MAY_HAVE_RUN_TEXT, READ_ONLY_CUT_TEXT
from drover.core.messages import ToolResultBlock
from drover.testing import FakeLLMServer, Scenario

from .launch import ForkServer, drover_argv, drover_env, launcher_for
from .watch import DroverProcess, recover

LONG = "mcp__everything__trigger-long-running-operation"
SESSION = "mcp-kill"


def _end_server(pidfile: Path) -> None:
    """The killed drover's MCP server sees its stdin close but may finish its operation first:
    end it (this test's own process, checked by its command line)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(pidfile.read_text().strip())
        if str(EVERYTHING) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("read_only", [False, True], ids=["side-effecting", "read-only"])
def test_sigkill_mid_mcp_call(fork_server: ForkServer, tmp_path: Path, read_only: bool) -> None:
    require_node()
    workdir, db, pidfile = tmp_path / "work", tmp_path / "drover.db", tmp_path / "server.pid"
    workdir.mkdir()
    config = write_config(
        tmp_path / "mcp.json", {"everything": everything(pidfile=pidfile, readOnly=read_only)}
    )
    server = FakeLLMServer(
        Scenario.from_data(
            [{"tool_calls": [{"name": LONG, "input": {"duration": 60, "steps": 60}}]}]
        )
    )
    server.start()
    argv = [
        *drover_argv("go", base_url=server.base_url, db=db, session=SESSION, workdir=workdir),
        "--mcp-config",
        str(config),
    ]
    env = {**drover_env(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    proc = DroverProcess(
        launcher_for("fork", fork_server), argv, env=env, stderr_path=tmp_path / "stderr.txt"
    )
    try:
        # The call runs on the server: its state is durable and progress comes back.
        proc.wait_line(lambda line: line.type == "tool_progress", what="the call's progress")
        proc.kill()
        assert proc.wait() == -signal.SIGKILL
    finally:
        proc.close()
        server.stop()
        _end_server(pidfile)
    recovery = asyncio.run(recover(db, SESSION))
    (before,) = recovery.calls_before
    assert (before.name, before.state, before.read_only) == (LONG, "running", read_only)
    assert recovery.recovered and recovery.turns[-1].status == "interrupted"
    (call,) = recovery.calls
    assert call.state == "interrupted"
    assert call.outcome_unknown is not read_only
    # What the next request of the session sends the model for that call.
    results = [
        block
        for message in recovery.history.pending
        for block in message.content
        if isinstance(block, ToolResultBlock)
    ]
    assert [r.content for r in results] == [READ_ONLY_CUT_TEXT if read_only else MAY_HAVE_RUN_TEXT]
