"""A repository cannot make drover read what lies outside it: the project files drover reads on
its own — ``AGENTS.md``/``CLAUDE.md`` and ``.mcp.json`` — are read only when they resolve inside
the project and are regular files of bounded size.

Each attack is a repository opened with ``drover -p``: a link to ``/proc/self/environ`` (the API
key), into ``~/.ssh`` (a private key, also when the project *is* the home directory), a FIFO (a
start that never ends), a sparse file of gigabytes, a ``.mcp.json`` that leads to another
file. What is refused is said in one line; the run goes on without it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from cli.helpers import base_args, clean_env, run_drover

from drover.testing.server import FakeLLMServer

KEY = "sk-ant-the-users-own-key-31415926535"
PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- the user's"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(PRIVATE_KEY)
    return home


def run_in(
    fake_llm: FakeLLMServer, tmp_path: Path, workdir: Path, home: Path, config: str = ""
) -> tuple[Any, str]:
    """``drover -p`` in ``workdir``: (the system prompt the model got, stderr)."""
    path = tmp_path / "config" / "config.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(config)
    env = clean_env(
        ANTHROPIC_API_KEY=KEY,
        HOME=str(home),
        XDG_DATA_HOME=str(tmp_path / "data"),
        DROVER_CONFIG=str(path),
    )
    fake_llm.script({"text": "done"})
    args = base_args(fake_llm, tmp_path)
    args[args.index("--workdir") + 1] = str(workdir)
    done = run_drover([*args, "-p", "hello"], env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return fake_llm.requests[-1].body.get("system"), done.stderr


@pytest.mark.parametrize(
    ("name", "target", "secret", "said"),
    [
        ("AGENTS.md", "/proc/self/environ", KEY, "leads outside the project"),
        ("CLAUDE.md", "{home}/.ssh/id_ed25519", PRIVATE_KEY, "leads outside the project"),
        ("AGENTS.md", ".ssh/id_ed25519", PRIVATE_KEY, "which drover does not read"),
    ],
    ids=["proc-self-environ", "into-ssh", "into-ssh-of-a-project-that-is-home"],
)
def test_a_link_out_of_reach_is_not_read(
    fake_llm: FakeLLMServer,
    tmp_path: Path,
    home: Path,
    cloned: Path,
    name: str,
    target: str,
    secret: str,
    said: str,
) -> None:
    workdir = home if not target.startswith(("/", "{")) else cloned
    (workdir / name).symlink_to(target.format(home=home))
    system, stderr = run_in(fake_llm, tmp_path, workdir, home)
    assert secret not in json.dumps(system)
    (line,) = [line for line in stderr.splitlines() if name in line]
    assert line.startswith("instructions skipped: ") and said in line


def test_a_fifo_does_not_hang_the_start(
    fake_llm: FakeLLMServer, tmp_path: Path, home: Path, cloned: Path
) -> None:
    os.mkfifo(cloned / "AGENTS.md")
    _system, stderr = run_in(fake_llm, tmp_path, cloned, home)
    assert "AGENTS.md is not a regular file" in stderr


def test_a_huge_sparse_file_is_not_read(
    fake_llm: FakeLLMServer, tmp_path: Path, home: Path, cloned: Path
) -> None:
    with (cloned / "AGENTS.md").open("wb") as file:
        file.truncate(8 * 1024**3)  # 8 GiB of nothing, in no disk space
    _system, stderr = run_in(fake_llm, tmp_path, cloned, home)
    assert "AGENTS.md is larger than 1,048,576 bytes" in stderr


def test_a_link_inside_the_project_is_read(
    fake_llm: FakeLLMServer, tmp_path: Path, home: Path, cloned: Path
) -> None:
    workdir = cloned
    (workdir / "docs").mkdir()
    (workdir / "docs" / "agents.md").write_text("Use tabs.")
    (workdir / "AGENTS.md").symlink_to("docs/agents.md")
    sub = workdir / "src"
    sub.mkdir()
    (sub / "CLAUDE.md").symlink_to("../docs/claude.md")
    (workdir / "docs" / "claude.md").write_text("Run the tests.")
    system, stderr = run_in(fake_llm, tmp_path, sub, home)  # (the parent's file is read too)
    assert "Use tabs." in system and "Run the tests." in system
    assert ".md" not in stderr


def test_an_mcp_json_that_leads_elsewhere_starts_nothing(
    fake_llm: FakeLLMServer, tmp_path: Path, home: Path, cloned: Path
) -> None:
    workdir = cloned
    mark = tmp_path / "started"
    elsewhere = tmp_path / "elsewhere.json"
    script = f"import pathlib; pathlib.Path({str(mark)!r}).touch()"
    server: dict[str, Any] = {"command": sys.executable, "args": ["-c", script]}
    elsewhere.write_text(json.dumps({"mcpServers": {"s": server}}))
    (workdir / ".mcp.json").symlink_to(elsewhere)
    _system, stderr = run_in(
        fake_llm, tmp_path, workdir, home, config="[mcp]\napprove_project = true\n"
    )
    assert not mark.exists()
    (line,) = [line for line in stderr.splitlines() if ".mcp.json" in line]
    assert line.startswith("MCP servers not started: ") and "leads outside the project" in line
