"""A ``-p`` turn loads only what it uses: the server, the database drivers, MCP, the other
provider's SDK and OpenTelemetry stay out of the process (they cost start-up time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from drover.testing.server import FakeLLMServer

from .helpers import base_args, clean_env

# Run ``main()`` as the ``drover`` script does, and write the names of the loaded modules when
# the process ends: a superset of what was loaded by the first request.
CHILD = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from drover.cli.main import main
sys.exit(main())
"""

ALWAYS_OUT = (
    "drover.server",
    "drover.web",
    # Reading the MCP config files is part of every run; the SDK and the client are not
    # when no server is configured.
    "drover.mcp.servers",
    "drover.mcp.connection",
    "drover.mcp.tool",
    "mcp",
    "psycopg",
    "psycopg_pool",
    "redis",
    "starlette",
    "uvicorn",
    "opentelemetry.sdk",
    "opentelemetry.exporter",
)


@pytest.mark.parametrize(
    ("model", "key", "out"),
    [
        # The Anthropic SDK imports the OpenTelemetry API itself (its tracing), so only the
        # SDK and exporters are pinned for it.
        ("anthropic:test", "ANTHROPIC_API_KEY", ("openai",)),
        ("openai:test", "OPENAI_API_KEY", ("anthropic", "opentelemetry")),
        ("openai-responses:test", "OPENAI_API_KEY", ("anthropic", "opentelemetry")),
    ],
)
def test_a_p_turn_leaves_unused_modules_unloaded(
    fake_llm: FakeLLMServer, tmp_path: Path, model: str, key: str, out: tuple[str, ...]
) -> None:
    fake_llm.script({"text": "hello"})
    args = base_args(fake_llm, tmp_path)
    args[args.index("anthropic:test")] = model
    if not model.startswith("anthropic"):
        args[args.index(fake_llm.base_url)] = fake_llm.openai_base_url
    listing = tmp_path / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(listing), "-p", "hi", *args],
        capture_output=True,
        text=True,
        env=clean_env(**{key: "test"}),
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert len(fake_llm.requests) == 1
    loaded = json.loads(listing.read_text())
    unwanted = [
        name
        for name in loaded
        if any(name == top or name.startswith(top + ".") for top in (*ALWAYS_OUT, *out))
    ]
    assert unwanted == []


#: What ``drover mcp approve``/``revoke`` (and a ``list`` with no server to start: none
#: configured, or only the workdir's that nobody approved) never use:
#: the MCP SDK and the web server it brings, the agent and its parts, any provider's SDK.
MCP_COMMANDS_OUT = (
    "mcp",
    "drover.mcp.servers",
    "drover.mcp.connection",
    "drover.agent.agent",
    "drover.runtime.runner",
    "drover.server",
    "uvicorn",
    "starlette",
    "anthropic",
    "openai",
)


@pytest.mark.parametrize(
    ("action", "mcp_json"),
    [("approve", True), ("revoke", True), ("list", False), ("list", True)],
)
def test_mcp_commands_that_start_no_server_leave_the_sdk_and_the_agent_unloaded(
    tmp_path: Path, action: str, mcp_json: bool
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    if mcp_json:
        servers = {"tool": {"command": "sh", "args": ["-c", "exit 1"]}}
        (workdir / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
    listing = tmp_path / "modules.json"
    env = clean_env(XDG_DATA_HOME=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(listing), "mcp", action, "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout  # it did its work (approved, forgot, or said there is nothing)
    if action == "list" and mcp_json:
        assert result.stdout.startswith("tool  stdio  sh -c exit 1  (from ")
        assert "\n  not approved: not started; " in result.stdout
    loaded = json.loads(listing.read_text())
    unwanted = [
        name
        for name in loaded
        if any(name == top or name.startswith(top + ".") for top in MCP_COMMANDS_OUT)
    ]
    assert unwanted == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["-p", "hi", "--session", "abcdef12"],
            "no session id starts with abcdef12 in this journal",
        ),
        (["-p", "--resume-turn", "--session", "typo"], "no session typo in this journal"),
    ],
)
def test_a_session_nobody_has_fails_before_the_provider_is_built(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """The session is looked up before the agent: its provider's SDK (~1 s to import) is
    never loaded for an id that names nothing."""
    listing = tmp_path / "modules.json"
    journal = ["--db", str(tmp_path / "journal.db"), "--model", "anthropic:test"]
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(listing), *args, *journal],
        capture_output=True,
        text=True,
        env=clean_env(ANTHROPIC_API_KEY="test"),
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"drover: error: {message}")
    assert len(result.stderr.splitlines()) == 1, result.stderr
    loaded = json.loads(listing.read_text())
    assert [name for name in loaded if name.split(".")[0] in ("anthropic", "openai")] == []
