"""The sandbox as users meet it: ``drover -p`` and the REPL, real processes, the fake server."""

from __future__ import annotations

import json
import os
import select
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from cli.helpers import DROVER, base_args, clean_env, run_drover

from drover.store.sql.log_shapes import unpack
from drover.testing.server import FakeLLMServer
from drover.tools.sandbox import SandboxStatus

from .procs import pids_named, pids_with

DEADLINE = 60.0


def bash_call(command: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "bash", "input": {"command": command}}]}


def tool_results(server: FakeLLMServer) -> str:
    """Everything the last request sent back to the model, as JSON text."""
    return json.dumps(server.requests[-1].body)


def test_headless_commands_run_sandboxed_by_default(
    sandbox: SandboxStatus, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    fake_llm.script(
        bash_call(
            "touch inside; echo leak > ../outside; touch /usr/leak; "
            "echo key=${ANTHROPIC_API_KEY:-none}"
        ),
        {"text": "Done."},
    )
    args = [*base_args(fake_llm, tmp_path), "--workdir", str(workdir)]
    env = clean_env(ANTHROPIC_API_KEY="sk-ant-cli-secret")
    result = run_drover(["-p", "go", *args], env=env)
    assert result.returncode == 0, result.stderr
    assert (workdir / "inside").exists()
    # ../outside is under /tmp, which the sandbox replaces by a private one: it went nowhere.
    assert not (tmp_path / "outside").exists()
    sent = tool_results(fake_llm)
    assert "cannot touch '/usr/leak': Read-only file system" in sent
    assert "key=none" in sent
    assert "sk-ant-cli-secret" not in sent
    assert "warning" not in result.stderr


def test_permission_mode_sandboxed_runs_contained_commands_without_asking(
    sandbox: SandboxStatus, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {
            "tool_calls": [
                {"name": "bash", "input": {"command": "echo ran > by-bash"}},
                {"name": "write_file", "input": {"path": "by-write", "content": "x"}},
            ]
        },
        {"text": "Done."},
    )
    args = [*base_args(fake_llm, tmp_path), "--permission-mode", "sandboxed"]
    result = run_drover(["-p", "go", *args])  # the later --permission-mode wins
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "by-bash").read_text() == "ran\n"
    # write_file is not sandboxed: it needs consent, and there is no terminal to ask.
    assert not (tmp_path / "by-write").exists()
    assert "denied write_file" in result.stderr
    assert "denied bash" not in result.stderr


def tool_start_sandboxes(db: Path) -> list[str | None]:
    """The ``sandbox`` of every ``tool_start`` in the journal's event log."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT payload FROM events WHERE type = 'tool_start' ORDER BY seq")
        return [unpack("tool_start", json.loads(p)).get("sandbox") for (p,) in rows]


def test_the_journal_records_the_sandbox_of_each_call(
    sandbox: SandboxStatus, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(bash_call("true"), {"text": "One."})
    fake_llm.script(bash_call("true"), {"text": "Two."})
    fake_llm.script(bash_call("true"), {"text": "Three."})
    base = [*base_args(fake_llm, tmp_path), "--session", "s"]
    for extra in ([], ["--sandbox", "read-only", "--sandbox-network"], ["--sandbox", "off"]):
        result = run_drover(["-p", "go", *extra, *base])
        assert result.returncode == 0, result.stderr
    assert tool_start_sandboxes(tmp_path / "journal.db") == ["workdir", "read-only+net", "off"]


def test_without_bubblewrap_headless_says_so_once_and_refuses_commands(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(bash_call("echo > ran"), {"text": "Could not."})
    env = clean_env(ANTHROPIC_API_KEY="test", PATH="/nonexistent")
    result = run_drover(["-p", "go", *base_args(fake_llm, tmp_path)], env=env)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "drover: warning: sandbox: unavailable (bubblewrap is not installed "
        "(apt-get install bubblewrap)); bash commands are refused"
    ]
    assert not (tmp_path / "ran").exists()
    assert "restart drover with --sandbox off" in tool_results(fake_llm)

    # Only an explicit --sandbox off runs it unsandboxed.
    fake_llm.script(bash_call("echo > ran"), {"text": "Ran."})
    result = run_drover(["-p", "go", "--sandbox", "off", *base_args(fake_llm, tmp_path)], env=env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ran").exists()
    assert "sandbox" not in result.stderr


def test_repl_start_up_line_shows_the_sandbox(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    env = clean_env(ANTHROPIC_API_KEY="test")
    args = [*base_args(fake_llm, tmp_path), "--sandbox", "read-only", "--sandbox-network"]
    proc = subprocess.run(
        [*DROVER, *args], input="", capture_output=True, text=True, env=env, timeout=DEADLINE
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("drover — session ")
    status = lines[1]
    assert status in (
        "sandbox: read-only (bubblewrap, network: any name through drover's proxy)",
        # a machine without bubblewrap says so instead
        "sandbox: unavailable (bubblewrap is not installed (apt-get install bubblewrap)); "
        "bash commands are refused",
    ), status
    off = subprocess.run(
        [*DROVER, *base_args(fake_llm, tmp_path), "--sandbox", "off"],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=DEADLINE,
    )
    assert off.stdout.splitlines()[1] == "sandbox: off (commands run with your full rights)"


def wait_for(find: Callable[[], list[int]]) -> list[int]:
    """Poll /proc (bounded by DEADLINE) until ``find`` sees a process."""
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        pids = find()
        if pids:
            return pids
        time.sleep(0.01)
    raise AssertionError("the command's processes never started")


def still_running(pids: list[int], within: float) -> list[int]:
    """Those of ``pids`` that have not ended within ``within`` seconds (waits on pidfds)."""
    fds = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            continue
    try:
        end = time.monotonic() + within
        pending = set(fds)
        while pending and time.monotonic() < end:
            ready, _, _ = select.select(list(pending), [], [], end - time.monotonic())
            pending -= set(ready)
        return [fds[fd] for fd in pending]
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.parametrize("when", ["starting", "running"])
def test_sigkill_of_drover_mid_command_takes_the_whole_sandbox_down(
    when: str, sandbox: SandboxStatus, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """``starting``: killed as soon as bubblewrap exists, usually while it still sets up the
    namespaces; ``running``: killed once the command and a process that left its session run.
    """
    mark = f"drover-sbx-kill-{uuid.uuid4().hex[:12]}"
    command = f"(setsid bash -c 'exec -a {mark}-escaped sleep 600' &); exec -a {mark} sleep 600"
    fake_llm.script(bash_call(command), {"text": "never"})
    fake_llm.allow_unexpected = True
    proc = subprocess.Popen(
        [*DROVER, "-p", "go", "--output-format", "stream-json", *base_args(fake_llm, tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=clean_env(ANTHROPIC_API_KEY="test"),
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if json.loads(line)["type"] == "tool_start":
                break
        if when == "starting":
            wait_for(lambda: pids_with(mark))
        else:
            wait_for(lambda: pids_named(f"{mark}-escaped"))
            wait_for(lambda: pids_named(mark))
    finally:
        proc.kill()
        proc.wait(timeout=DEADLINE)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()
    # Whatever existed of the sandbox at the kill, or was still being created, must end.
    pids = pids_with(mark)
    assert still_running(pids, within=20) == []
    assert pids_with(mark) == []


def test_serve_refuses_to_start_without_a_sandbox_unless_told_off(tmp_path: Path) -> None:
    env = clean_env(ANTHROPIC_API_KEY="test", PATH="/nonexistent")
    args = ["serve", "--port", "0", "--db", str(tmp_path / "j.db"), "--workdir", str(tmp_path)]
    refused = run_drover(args, env=env, timeout=DEADLINE)
    assert refused.returncode == 1
    assert refused.stderr.strip().startswith("drover: error:"), refused.stderr
    assert "bubblewrap" in refused.stderr and "--sandbox off" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("setting", "client"), [("", "aiohttp"), ('http_client = "httpx"', "httpx")]
)
def test_serve_start_up_line_shows_the_sandbox(tmp_path: Path, setting: str, client: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(setting + "\n", encoding="utf-8")
    env = clean_env(ANTHROPIC_API_KEY="test", DROVER_CONFIG=str(config))
    args = ["serve", "--port", "0", "--db", str(tmp_path / "j.db"), "--workdir", str(tmp_path)]
    with subprocess.Popen(
        [*DROVER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            first = proc.stderr.readline().strip()
            assert first == "drover serve: bash sandbox: workdir (bubblewrap, no network)", first
            # The SDKs' aiohttp client (installed with drover's server extra) unless the config
            # names httpx.
            assert proc.stderr.readline().strip() == f"drover serve: model API through {client}"
            assert proc.stdout.readline().startswith("drover serve: listening on http://")
        finally:
            proc.terminate()
            proc.communicate(timeout=DEADLINE)
