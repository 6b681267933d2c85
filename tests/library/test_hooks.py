"""Hooks in real turns: the real ``bash`` tool and its bubblewrap sandbox, a real SQLite journal,
the scripted model. A hook reads its event on stdin; ``pre_tool`` exiting 2 blocks the call and
its stderr reaches the model; each run is a ``hook`` event in the journal's log and a blocked
call's record says why; hooks run in bash's sandbox, with a timeout."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from drover import Agent
from drover.config.settings import Config
from drover.config.tables import HookSpec
from drover.core.messages import ToolResultBlock
from drover.core.rules import Rule
from drover.testing.scripted import Reply, ScriptedProvider, call
from drover.tools.sandbox import SandboxSettings, probe_sandbox

SANDBOX = probe_sandbox(SandboxSettings())
needs_sandbox = pytest.mark.skipif(
    not SANDBOX.active, reason=f"bubblewrap cannot run here: {SANDBOX.reason}"
)


def hook(event: str, command: str, tool: str | None = None, timeout: float = 30) -> HookSpec:
    rule = None if tool is None else Rule.parse(tool)
    return HookSpec(
        event=event,  # type: ignore[arg-type]
        command=command,
        tool=rule,
        timeout=timeout,
        source=f"test hooks ({event})",
    )


async def run_turn(
    tmp_path: Path, replies: list[Reply], hooks: list[HookSpec], sandbox: str = "workdir"
) -> tuple[ScriptedProvider, Agent, str]:
    provider = ScriptedProvider(replies)
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    agent = Agent(
        provider,
        store=str(tmp_path / "journal.db"),
        workdir=workdir,
        permission_mode="allow",
        sandbox=sandbox,
        config=Config(),
        hooks=hooks,
    )
    await agent.open()
    result = await agent.run("go")
    return provider, agent, result.session_id


def told(provider: ScriptedProvider, request: int = 1) -> list[ToolResultBlock]:
    return list(provider.requests[request].messages[-1].tool_results)


async def hook_events(agent: Agent, session_id: str) -> list[dict[str, Any]]:
    return [dict(e.payload) for e in await agent.store.events_after(session_id) if e.type == "hook"]


@needs_sandbox
async def test_a_pre_tool_hook_that_exits_2_blocks_and_the_model_reads_why(tmp_path: Path) -> None:
    guard = hook(
        "pre_tool",
        'cat > seen.json; echo "no force pushes here" >&2; exit 2',
        tool="bash(git push*)",
    )
    provider, agent, session_id = await run_turn(
        tmp_path,
        [
            Reply(
                calls=[call("bash", command="git push --force"), call("bash", command="echo hi")]
            ),
            Reply(text="ok"),
        ],
        [guard],
    )
    try:
        blocked, ran = told(provider)
        assert blocked.is_error
        assert blocked.content == (
            "Blocked by a pre_tool hook (test hooks (pre_tool)): no force pushes here"
        )
        assert ran.content.strip() == "hi"  # the rule kept the hook off the other call
        seen = json.loads((tmp_path / "work" / "seen.json").read_text())
        assert seen["event"] == "pre_tool" and seen["tool_name"] == "bash"
        assert seen["tool_input"] == {"command": "git push --force"}
        assert seen["session_id"] == session_id and seen["turn_id"] and seen["call_id"]
        # The journal: the call's record and the event log both say what the hook did.
        [turn] = await agent.store.turns(session_id)
        calls = {c.call_id: c for c in await agent.store.tool_calls(turn.id)}
        record = calls[seen["call_id"]]
        assert record.state == "denied" and "no force pushes here" in (record.output or "")
        [event] = await hook_events(agent, session_id)
        assert event["point"] == "pre_tool" and event["call_id"] == seen["call_id"]
        assert (event["outcome"], event["exit_code"]) == ("blocked", 2)
        assert event["message"] == "no force pushes here\n"
        assert event["hook"] == "test hooks (pre_tool)"
    finally:
        await agent.aclose()


@needs_sandbox
async def test_hooks_run_in_the_sandbox_bash_runs_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox passes only an allow-list of variables and has its own PID namespace: a
    hook sees what a bash command sees, not drover's environment."""
    monkeypatch.setenv("DROVER_HOOK_CANARY", "visible")
    probe = hook("pre_tool", 'echo "${DROVER_HOOK_CANARY:-hidden} $$" > probe.txt')
    replies = [Reply(calls=[call("bash", command="true")]), Reply(text="ok")]
    _provider, agent, session_id = await run_turn(tmp_path, list(replies), [probe])
    try:
        canary, pid = (tmp_path / "work" / "probe.txt").read_text().split()
        assert canary == "hidden" and int(pid) < 10  # a fresh PID namespace
        [event] = await hook_events(agent, session_id)
        assert event["outcome"] == "passed"
    finally:
        await agent.aclose()
    _provider, agent, _ = await run_turn(tmp_path, list(replies), [probe], sandbox="off")
    await agent.aclose()
    assert (tmp_path / "work" / "probe.txt").read_text().split()[0] == "visible"


async def test_a_hook_past_its_timeout_is_killed_and_blocks(tmp_path: Path) -> None:
    pidfile = tmp_path / "hook.pid"
    slow = hook("pre_tool", f"echo $$ > {pidfile}; exec sleep 60", timeout=0.5)
    provider, agent, session_id = await run_turn(
        tmp_path,
        [Reply(calls=[call("bash", command="touch ran")]), Reply(text="ok")],
        [slow],
        sandbox="off",
    )
    try:
        [result] = told(provider)
        assert result.content.startswith("Blocked: a pre_tool hook (test hooks (pre_tool)) ")
        assert "could not check this call: no answer in 0.5 s" in result.content
        assert not (tmp_path / "work" / "ran").exists()
        [event] = await hook_events(agent, session_id)
        assert (event["outcome"], event["exit_code"]) == ("timed_out", None)
        with pytest.raises(ProcessLookupError):
            os.kill(int(pidfile.read_text()), 0)
    finally:
        await agent.aclose()


async def test_a_failing_pre_tool_hook_does_not_block_and_post_tool_2_adds_a_note(
    tmp_path: Path,
) -> None:
    hooks = [
        hook("pre_tool", "echo broken >&2; exit 1"),
        hook("post_tool", "cat > response.json; echo 'tests now fail' >&2; exit 2"),
    ]
    provider, agent, session_id = await run_turn(
        tmp_path,
        [Reply(calls=[call("bash", command="echo done > ran; echo written")]), Reply(text="ok")],
        hooks,
        sandbox="off",
    )
    try:
        [result] = told(provider)
        assert (tmp_path / "work" / "ran").exists()
        note = "[post_tool hook (test hooks (post_tool)): tests now fail]"
        assert result.content == f"written\n\n{note}"
        response = json.loads((tmp_path / "work" / "response.json").read_text())
        assert response["tool_response"] == {"output": "written\n", "is_error": False}
        events = await hook_events(agent, session_id)
        outcomes = [(e["point"], e["outcome"], e["exit_code"]) for e in events]
        assert outcomes == [("pre_tool", "failed", 1), ("post_tool", "blocked", 2)]
    finally:
        await agent.aclose()


async def test_turn_end_hooks_get_how_the_turn_ended(tmp_path: Path) -> None:
    record = tmp_path / "turn-end.json"
    _provider, agent, session_id = await run_turn(
        tmp_path, [Reply(text="All done.")], [hook("turn_end", f"cat > {record}")], sandbox="off"
    )
    await agent.aclose()
    seen = json.loads(record.read_text())
    assert seen["event"] == "turn_end" and seen["session_id"] == session_id
    assert (seen["status"], seen["reason"], seen["text"]) == ("done", None, "All done.")


def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "hook-started"
    os.mkfifo(path)
    return path


async def _interrupt_while_a_hook_runs(tmp_path: Path, spec: HookSpec, started: Path) -> Any:
    provider = ScriptedProvider([Reply(calls=[call("bash", command="echo out > ran; echo out")])])
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with Agent(
        provider,
        store=str(tmp_path / "journal.db"),
        workdir=workdir,
        permission_mode="allow",
        sandbox="off",
        config=Config(),
        hooks=[spec],
    ) as agent:
        session = await agent.session()
        running = session.start("go")
        # The hook's first write blocks until this read: it runs from here on.
        async with asyncio.timeout(30):  # the failure bound
            await asyncio.to_thread(started.read_text)
        running.interrupt()
        await running.finished()
        [turn] = await agent.store.turns(session.id)
        [record] = await agent.store.tool_calls(turn.id)
        return turn, record, session.pending


async def test_an_interruption_during_a_pre_tool_hook_ends_the_call_as_never_run(
    tmp_path: Path,
) -> None:
    started = fifo(tmp_path)
    spec = hook("pre_tool", f"echo go > {started}; exec sleep 60")
    turn, record, pending = await _interrupt_while_a_hook_runs(tmp_path, spec, started)
    assert turn.status == "interrupted"
    assert record.state == "interrupted" and not record.outcome_unknown
    assert not (tmp_path / "work" / "ran").exists()
    [result] = pending[-1].tool_results
    assert result.content.startswith("Interrupted before it ran")


async def test_an_interruption_during_a_post_tool_hook_keeps_the_real_output(
    tmp_path: Path,
) -> None:
    started = fifo(tmp_path)
    spec = hook("post_tool", f"echo go > {started}; exec sleep 60")
    turn, record, pending = await _interrupt_while_a_hook_runs(tmp_path, spec, started)
    assert turn.status == "interrupted"
    # The tool had finished: its state and output are the real ones, not "outcome unknown".
    assert (record.state, record.output, record.outcome_unknown) == (
        "output-available",
        "out\n",
        False,
    )
    [result] = pending[-1].tool_results
    assert result.content == "out\n" and not result.is_error
