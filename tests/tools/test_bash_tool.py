"""The bash tool: output, exit codes, streaming, and that no process outlives a call.

These run unsandboxed (``BashTool()`` without a sandbox, as ``--sandbox off`` does): they check
host pids the command prints. The same behaviour inside the sandbox: test_sandbox_process.py.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from drover.errors import ToolError
from drover.tools.base import ToolContext
from drover.tools.builtin.bash import BashTool

from .procs import alive, process_state, wait_dead


class Lines:
    """An ``on_output`` that collects output and signals when enough lines have arrived."""

    def __init__(self, wanted: int) -> None:
        self.chunks: list[str] = []
        self.ready = asyncio.Event()
        self._wanted = wanted

    def __call__(self, chunk: str) -> None:
        self.chunks.append(chunk)
        if self.text.count("\n") >= self._wanted:
            self.ready.set()

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def pids(self) -> list[int]:
        return [int(line) for line in self.text.split()]


async def test_output_merges_stdout_and_stderr(ctx: ToolContext) -> None:
    out = await BashTool().run({"command": "echo out; echo err >&2; pwd"}, ctx)
    assert not out.is_error
    assert out.content == f"out\nerr\n{ctx.workdir}\n"


async def test_non_zero_exit_is_an_error_with_the_code(ctx: ToolContext) -> None:
    out = await BashTool().run({"command": "echo partial; exit 3"}, ctx)
    assert out.is_error
    assert out.content == "partial\n[exit code 3]"


async def test_no_output_says_so(ctx: ToolContext) -> None:
    out = await BashTool().run({"command": "true"}, ctx)
    assert out.content == "(no output)"
    assert not out.is_error


async def test_stdin_is_closed(ctx: ToolContext) -> None:
    out = await BashTool(timeout=10).run({"command": "cat; echo done"}, ctx)
    assert out.content == "done\n"


async def test_output_is_capped(ctx: ToolContext) -> None:
    out = await BashTool(output_limit=1_000).run({"command": "seq 1 20000"}, ctx)
    assert out.truncated
    assert out.content.startswith("1\n2\n")
    assert out.content.endswith("19999\n20000\n")
    assert "characters cut: output exceeded 1,000 characters" in out.content


async def test_invalid_input_is_a_tool_error(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="command: Field required"):
        await BashTool().run({}, ctx)


async def test_streams_output_before_finishing(workdir: Path) -> None:
    lines = Lines(1)
    ctx = ToolContext(workdir=workdir, on_output=lines)
    call = asyncio.create_task(BashTool().run({"command": "echo first; sleep 30"}, ctx))
    await asyncio.wait_for(lines.ready.wait(), timeout=10)
    assert not call.done()
    assert lines.text == "first\n"
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_background_jobs_are_ended_when_the_command_finishes(ctx: ToolContext) -> None:
    command = "sleep 30 & echo $!; sleep 30 >/dev/null 2>&1 & echo $!"
    out = await BashTool(timeout=10).run({"command": command}, ctx)
    assert not out.is_error
    for pid in (int(p) for p in out.content.split()):
        assert await wait_dead(pid), f"background job {pid} survived the call"


async def test_timeout_kills_the_process_group(ctx: ToolContext) -> None:
    command = "echo $$; sleep 30 & echo $!; sleep 30 & echo $!; sleep 30"
    out = await BashTool(timeout=2.0).run({"command": command}, ctx)
    assert out.is_error
    assert "[command timed out after 2 s; its processes were killed." in out.content
    pids = [int(line) for line in out.content.splitlines()[:3]]
    shell, children = pids[0], pids[1:]
    for pid in children:
        assert await wait_dead(pid), f"child {pid} survived the timeout"
    assert process_state(shell) is None, "the shell was not reaped"


async def test_cancellation_kills_children_and_leaves_no_zombie(workdir: Path) -> None:
    lines = Lines(3)
    ctx = ToolContext(workdir=workdir, on_output=lines)
    command = "echo $$; sleep 30 & echo $!; sleep 30 & echo $!; wait"
    call = asyncio.create_task(BashTool().run({"command": command}, ctx))
    await asyncio.wait_for(lines.ready.wait(), timeout=10)
    shell, *children = lines.pids()
    assert all(alive(pid) for pid in (shell, *children))

    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    assert process_state(shell) is None, "the shell is left as a zombie or still running"
    for pid in children:
        assert await wait_dead(pid), f"child {pid} survived the cancellation"


async def test_processes_ignoring_sigterm_get_sigkill(workdir: Path) -> None:
    lines = Lines(2)
    ctx = ToolContext(workdir=workdir, on_output=lines)
    command = "trap '' TERM; echo $$; sleep 30 & echo $!; wait"
    call = asyncio.create_task(BashTool(kill_grace=0.2).run({"command": command}, ctx))
    await asyncio.wait_for(lines.ready.wait(), timeout=10)
    shell, child = lines.pids()

    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    assert process_state(shell) is None
    assert await wait_dead(child)


async def test_missing_workdir_is_a_tool_error(tmp_path: Path) -> None:
    ctx = ToolContext(workdir=tmp_path / "gone")
    with pytest.raises(ToolError, match="cannot start /bin/bash"):
        await BashTool().run({"command": "true"}, ctx)


async def test_timeout_is_configurable_per_instance() -> None:
    assert BashTool().timeout == 120.0
    assert BashTool(timeout=5).timeout == 5
    with pytest.raises(ValueError, match="positive"):
        BashTool(timeout=0)


def test_bash_is_a_side_effecting_tool_with_a_command_input() -> None:
    bash = BashTool()
    assert bash.name == "bash"
    assert not bash.read_only
    assert bash.input_schema == {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The shell command to run."}},
        "required": ["command"],
        "additionalProperties": False,
    }
    assert "shell command" in bash.description
    assert os.path.exists("/bin/bash")
