"""MCP on the command line, as a user runs it: ``drover mcp list``, ``.mcp.json`` in the workdir
and ``--mcp-config`` on ``-p`` — real subprocesses, real servers, the fake LLM server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli.helpers import base_args, clean_env, run_drover
from support.mcp_servers import everything, filesystem, write_config

from drover.testing import FakeLLMServer

from .conftest import call

pytestmark = pytest.mark.usefixtures("node")

SECRET = "token-from-the-env-2718281828"


def env(tmp_path: Path) -> dict[str, str]:
    """A config that approves every project's servers (the approval itself is
    ``tests/cli/test_mcp_approval.py``'s) and no user-level mcp.json, logs in ``tmp_path``, a
    secret to keep."""
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir(exist_ok=True)
    config.write_text("[mcp]\napprove_project = true\n")
    return clean_env(
        ANTHROPIC_API_KEY="test",
        XDG_DATA_HOME=str(tmp_path / "data"),
        DROVER_TEST_MCP_SECRET=SECRET,
        DROVER_CONFIG=str(config),
    )


def test_mcp_list_shows_servers_status_and_tools(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    write_config(
        workdir / ".mcp.json",
        {
            "everything": everything(env={"API_TOKEN": "${DROVER_TEST_MCP_SECRET}"}),
            "broken": {"command": str(tmp_path / "no-such-server")},
        },
    )
    extra = write_config(
        tmp_path / "extra.json", {"files": filesystem(workdir, readOnly=["read_text_file"])}
    )
    args = ["mcp", "list", "--workdir", str(workdir), "--mcp-config", str(extra)]
    listed = run_drover(args, env=env(tmp_path))
    assert listed.returncode == 1, listed.stderr  # a server did not start
    out = listed.stdout
    assert (
        f"everything  stdio  node {everything()['args'][0]} stdio  (from {workdir / '.mcp.json'})"
        in out
    )
    assert "mcp__everything__echo  [asks]  Echoes back the input string" in out
    assert "mcp__files__read_text_file  [read-only]" in out
    assert "mcp__files__write_file  [asks]" in out
    assert "broken  stdio" in out and "failed: No such file or directory" in out
    assert SECRET not in out + listed.stderr

    as_json = run_drover([*args, "--json"], env=env(tmp_path))
    servers = {s["name"]: s for s in json.loads(as_json.stdout)["servers"]}
    assert servers["everything"]["status"] == "started"
    assert servers["broken"]["status"] == "failed"
    echo = next(t for t in servers["everything"]["tools"] if t["server_name"] == "echo")
    assert echo == {
        "name": "mcp__everything__echo",
        "server_name": "echo",
        "description": "Echoes back the input string",
        "read_only": False,
        "trusted": False,
    }
    assert SECRET not in as_json.stdout


def test_mcp_list_with_nothing_configured(tmp_path: Path) -> None:
    listed = run_drover(["mcp", "list", "--workdir", str(tmp_path)], env=env(tmp_path))
    assert listed.returncode == 0
    assert listed.stdout.startswith("no MCP servers configured")


def test_a_broken_config_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"x": {"type": "sse", "url": "u"}}}')
    for args in (
        ["mcp", "list", "--workdir", str(tmp_path)],
        ["-p", "hi", "--workdir", str(tmp_path)],
    ):
        result = run_drover(args, env=env(tmp_path))
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert 'the "sse" transport is not supported' in result.stderr


def test_headless_turn_with_the_workdir_config_and_a_flag(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    write_config(tmp_path / ".mcp.json", {"everything": everything(readOnly=True)})
    extra = write_config(tmp_path / "more.json", {"files": filesystem(tmp_path)})
    (tmp_path / "a.txt").write_text("alpha")
    fake_llm.script(
        {
            "tool_calls": [
                call("mcp__everything__trigger-long-running-operation", duration=0.6, steps=3),
                call("mcp__files__read_text_file", path=str(tmp_path / "a.txt")),
            ]
        },
        {"text": "Both done."},
    )
    args = ["-p", "go", *base_args(fake_llm, tmp_path), "--mcp-config", str(extra)]
    result = run_drover([*args, "--output-format", "stream-json"], env=env(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    progress = [line for line in lines if line["type"] == "tool_progress"]
    assert progress and all(p["transient"] and p["total"] == 3 for p in progress)
    done = {line["name"]: line for line in lines if line["type"] == "tool_done"}
    assert not done["mcp__files__read_text_file"]["is_error"]
    assert "alpha" in json.dumps(fake_llm.requests[1].body)
