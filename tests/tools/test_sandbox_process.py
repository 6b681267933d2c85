"""Inside the sandbox, interrupts, timeouts, output caps and clean-up work as they do outside.

A sandboxed command's pids are those of its own PID namespace, so these tests find its
processes from outside by a marker unique to the test in their command lines (bubblewrap,
bash and every subshell carry the command text; ``exec -a`` names the long sleepers).
"""

from __future__ import annotations

import asyncio
import shlex
import uuid

import pytest

from drover.tools.base import ToolContext
from drover.tools.builtin.bash import BashTool
from drover.tools.sandbox import PROCESS_LIMIT, SandboxStatus, guard_argv, pid_namespace

from .procs import all_dead, pids_with


class FirstOutput:
    """An ``on_output`` that records the marked processes alive once ``wanted`` has shown up
    ``count`` times."""

    def __init__(self, wanted: str, marker: str, count: int = 1) -> None:
        self.chunks: list[str] = []
        self.ready = asyncio.Event()
        self.pids: list[int] = []
        self._wanted = wanted
        self._marker = marker
        self._count = count

    def __call__(self, chunk: str) -> None:
        self.chunks.append(chunk)
        if not self.ready.is_set() and "".join(self.chunks).count(self._wanted) >= self._count:
            self.pids = pids_with(self._marker)
            self.ready.set()


def marker() -> str:
    return f"drover-sbx-{uuid.uuid4().hex[:12]}"


async def test_output_exit_code_and_cap(sandbox: SandboxStatus, ctx: ToolContext) -> None:
    out = await BashTool(sandbox=sandbox).run({"command": "echo out; echo err >&2; exit 3"}, ctx)
    assert out.is_error
    assert out.content == "out\nerr\n[exit code 3]"
    capped = await BashTool(output_limit=1_000, sandbox=sandbox).run(
        {"command": "seq 1 20000"}, ctx
    )
    assert capped.truncated
    assert capped.content.startswith("1\n2\n")
    assert capped.content.endswith("19999\n20000\n")
    out = await BashTool(timeout=10, sandbox=sandbox).run({"command": "cat; echo done"}, ctx)
    assert out.content == "done\n"  # stdin is closed inside too


async def test_a_ten_minute_command_is_ended_by_the_timeout(
    sandbox: SandboxStatus, workdir: object
) -> None:
    mark = marker()
    seen = FirstOutput("started", mark)
    ctx = ToolContext(workdir=workdir, on_output=seen)  # type: ignore[arg-type]
    command = f"(exec -a {mark}-child sleep 600) & echo started; exec -a {mark} sleep 600"
    out = await BashTool(timeout=2, sandbox=sandbox).run({"command": command}, ctx)
    assert out.is_error
    assert "[command timed out after 2 s; its processes were killed." in out.content
    assert seen.ready.is_set()
    assert len(seen.pids) >= 3, seen.pids  # bubblewrap (outside and init), the sleepers
    assert await all_dead(seen.pids) == []
    assert pids_with(mark) == []


async def test_a_fork_bomb_is_ended_with_every_child(
    sandbox: SandboxStatus, workdir: object
) -> None:
    # Exponential, and deaf to SIGTERM, but bounded (255 processes) so that a shared test
    # machine survives a broken sandbox: a real `:(){ :|:& };:` is contained the same way.
    # Each of the 128 leaves says "leaf"; when all have, every process of the tree exists.
    mark = marker()
    seen = FirstOutput("leaf", mark, count=128)
    ctx = ToolContext(workdir=workdir, on_output=seen)  # type: ignore[arg-type]
    command = (
        "trap '' TERM; bomb() { if [ $1 -gt 0 ]; then bomb $(($1-1)) & bomb $(($1-1)) & "
        f"else echo leaf; fi; exec -a {mark} sleep 600; }}; bomb 7"
    )
    out = await BashTool(timeout=8, kill_grace=0.5, sandbox=sandbox).run({"command": command}, ctx)
    assert "timed out" in out.content
    assert seen.ready.is_set()
    # Every leaf was seen; an inner process may not have renamed itself yet on a busy machine.
    assert len(seen.pids) >= 128, len(seen.pids)
    assert await all_dead(seen.pids) == []
    assert pids_with(mark) == []


async def test_cancellation_ends_the_sandbox_and_processes_that_left_the_group(
    sandbox: SandboxStatus, workdir: object
) -> None:
    mark = marker()
    seen = FirstOutput("ready", mark)
    ctx = ToolContext(workdir=workdir, on_output=seen)  # type: ignore[arg-type]
    # setsid takes the sleeper out of the process group drover signals; the PID namespace
    # still ends it.
    command = f"setsid bash -c 'echo ready; exec -a {mark}-escaped sleep 600' & wait"
    call = asyncio.create_task(BashTool(sandbox=sandbox).run({"command": command}, ctx))
    await asyncio.wait_for(seen.ready.wait(), timeout=20)
    assert any(pid in pids_with(f"{mark}-escaped") for pid in seen.pids)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await all_dead(seen.pids) == []


async def test_the_watchdog_never_fires_in_drovers_own_pid_namespace(
    sandbox: SandboxStatus, workdir: object
) -> None:
    """``kill -KILL -1`` in drover's namespace would hit every process of the user on the
    machine, so the watchdog refuses to act in the namespace it is told is drover's. Checked
    inside a sandbox (whose namespace stands in for drover's) so that a broken check could only
    hurt the sandbox; the command first makes sure it really is in a namespace of its own."""
    host_ns = pid_namespace()
    assert host_ns is not None
    mark = marker()
    guard = shlex.join(guard_argv(87, "$NS")).replace("'$NS'", '"$NS"')
    # The check waits (bounded by the tool's timeout) until no watchdog is left, then looks
    # for the canary; "[(]" keeps the pattern from matching the check's own command line.
    check = (
        'while ps -eo args= | grep -q "^/bin/bash -c ( [(]read -r _ <&87;"; do sleep 0.01; done; '
        'kill -0 "$1" && echo canary-alive'
    )
    command = (
        f'[ "$(readlink /proc/self/ns/pid)" != "{host_ns}" ] || exit 99; '
        "NS=$(readlink /proc/self/ns/pid); "
        f"(exec -a {mark} sleep 600) & canary=$!; "
        # fd 87 at end-of-file at once: the watchdog wakes immediately and decides. (The
        # sandbox's own watchdog, on drover's guard pipe, reads another fd.)
        f"{guard} /bin/bash -c {shlex.quote(check)} check $canary 87</dev/null"
    )
    out = await BashTool(timeout=30, sandbox=sandbox).run(
        {"command": command},
        ToolContext(workdir=workdir),  # type: ignore[arg-type]
    )
    assert out.content == "canary-alive\n", out.content


async def test_commands_run_with_a_process_limit(sandbox: SandboxStatus, ctx: ToolContext) -> None:
    out = await BashTool(sandbox=sandbox).run({"command": "ulimit -u"}, ctx)
    assert out.content == f"{PROCESS_LIMIT}\n"
