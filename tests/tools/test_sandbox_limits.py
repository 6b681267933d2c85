"""The limits a sandboxed command runs under, and the cgroups drover makes for them (real
bubblewrap; the fork bomb itself is in tests/security)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from drover.tools.base import ToolContext
from drover.tools.builtin.bash import BashTool
from drover.tools.limits import CGROUP_PREFIX, limit_shell

from .conftest import SandboxFactory


def cgroups(root: Path, prefix: str) -> list[Path]:
    return [p for p in root.iterdir() if p.name.startswith(prefix)]


def test_limit_shell_sets_processes_and_memory() -> None:
    assert limit_shell(64, 256 << 20) == (
        "ulimit -u 64 2>/dev/null; ulimit -d 262144 2>/dev/null; "
    )


async def test_commands_run_with_the_configured_limits(
    make_sandbox: SandboxFactory, ctx: ToolContext
) -> None:
    sandbox = make_sandbox(processes=100, memory=512 << 20)
    out = await BashTool(sandbox=sandbox).run({"command": "ulimit -u; ulimit -d"}, ctx)
    assert out.content == "100\n524288\n"


async def test_each_call_gets_a_pids_cgroup_that_goes_with_it(
    make_sandbox: SandboxFactory, ctx: ToolContext
) -> None:
    sandbox = make_sandbox(processes=100)
    root = sandbox.pids_cgroup
    if root is None:
        pytest.skip("drover cannot make pids cgroups here (the rlimit alone applies)")
    # A cgroup a killed drover left behind (no process has this pid: above pid_max).
    stale = root / f"{CGROUP_PREFIX}999999999-0"
    stale.mkdir()
    mine = f"{CGROUP_PREFIX}{os.getpid()}-"
    # The command reads its cgroup's limit from the host's cgroup file system (read-only
    # in the sandbox): the one directory of this drover there is the call's.
    command = f"cat {root}/{mine}*/pids.max"
    out = await BashTool(sandbox=sandbox).run({"command": command}, ctx)
    assert out.content == "100\n", out.content
    assert not stale.exists()
    assert not cgroups(root, mine)  # removed when the call ended
