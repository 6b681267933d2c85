"""A workdir's ``.mcp.json`` runs nothing unasked: its servers start only once approved — by
the config file, by ``drover mcp approve``, or by the REPL's question, kept per project and
file content — and ``-p``, ``serve`` and ``drover mcp list`` say what they skipped and how to
approve it.

The "servers" here are shell commands that leave a mark file when started (and then fail as
MCP servers, which drover survives): whether the mark exists is whether drover ran them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from drover.config.settings import Config
from drover.errors import ConfigError
from drover.mcp.approval import Approvals, ask_once, project_servers
from drover.mcp.config import McpFile, load_servers
from drover.testing.server import FakeLLMServer

from .helpers import Terminal, base_args, clean_env, run_drover


def marker_server(mark: Path) -> dict[str, object]:
    return {"command": "sh", "args": ["-c", f"touch {mark}; exit 1"]}


def write_project(workdir: Path, **marks: Path) -> Path:
    servers = {name: marker_server(mark) for name, mark in marks.items()}
    path = workdir / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def environment(tmp_path: Path, config: str = "") -> dict[str, str]:
    """The user's data (where answers are kept) and config in ``tmp_path``."""
    path = tmp_path / "config" / "config.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(config)
    return clean_env(
        ANTHROPIC_API_KEY="test",
        XDG_DATA_HOME=str(tmp_path / "data"),
        DROVER_CONFIG=str(path),
    )


@pytest.fixture
def work(tmp_path: Path) -> Path:
    workdir = tmp_path / "work"
    workdir.mkdir()
    return workdir


def headless(server: FakeLLMServer, tmp_path: Path, work: Path, env: dict[str, str]) -> str:
    server.script({"text": "Hello."})
    args = base_args(server, tmp_path)
    args[args.index("--workdir") + 1] = str(work)
    done = run_drover(["-p", "hi", *args], env=env)
    assert done.returncode == 0, done.stderr
    return str(done.stderr)


def test_p_skips_unapproved_project_servers_and_says_how_to_approve(
    fake_llm: FakeLLMServer, tmp_path: Path, work: Path
) -> None:
    mark = tmp_path / "ran"
    write_project(work, cloned=mark)
    said = headless(fake_llm, tmp_path, work, environment(tmp_path))
    assert not mark.exists()
    assert f"MCP servers of {work / '.mcp.json'} not started (not approved): cloned" in said
    assert f"drover mcp approve --workdir {work}" in said and "approve_project" in said


def test_the_config_file_approves_all_or_named_servers(
    fake_llm: FakeLLMServer, tmp_path: Path, work: Path
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    write_project(work, one=one, two=two)
    said = headless(
        fake_llm, tmp_path, work, environment(tmp_path, '[mcp]\napprove_project = ["one"]\n')
    )
    assert one.exists() and not two.exists()
    assert "not started (not approved): two" in said
    one.unlink()
    headless(fake_llm, tmp_path, work, environment(tmp_path, "[mcp]\napprove_project = true\n"))
    assert one.exists() and two.exists()


def test_mcp_approve_holds_until_the_file_changes_and_revoke_forgets(
    fake_llm: FakeLLMServer, tmp_path: Path, work: Path
) -> None:
    env = environment(tmp_path)
    mark = tmp_path / "ran"
    write_project(work, tool=mark)
    listed = run_drover(["mcp", "list", "--workdir", str(work)], env=env)
    assert listed.returncode == 0 and not mark.exists()
    assert "tool  stdio  sh -c" in listed.stdout and "not approved: not started" in listed.stdout
    approved = run_drover(["mcp", "approve", "--workdir", str(work)], env=env)
    assert approved.returncode == 0 and "approved tool: sh -c" in approved.stdout
    headless(fake_llm, tmp_path, work, env)
    assert mark.exists()
    # The same name now runs another program: the approval was for the old content.
    other = tmp_path / "other"
    write_project(work, tool=other)
    said = headless(fake_llm, tmp_path, work, env)
    assert not other.exists() and "not started (not approved): tool" in said
    run_drover(["mcp", "approve", "--workdir", str(work)], env=env)
    revoked = run_drover(["mcp", "revoke", "--workdir", str(work)], env=env)
    assert "the REPL asks again" in revoked.stdout
    headless(fake_llm, tmp_path, work, env)
    assert not other.exists()


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        if terminal.proc.poll() is None:
            terminal.proc.kill()
            terminal.proc.wait()


def test_the_repl_asks_once_per_project_and_remembers_either_answer(
    fake_llm: FakeLLMServer, tmp_path: Path, work: Path, terminals: list[Terminal]
) -> None:
    mark = tmp_path / "ran"
    write_project(work, helper=mark)
    env = {**environment(tmp_path), "TERM": "dumb"}
    args = base_args(fake_llm, tmp_path)
    args[args.index("--workdir") + 1] = str(work)

    def open_repl() -> Terminal:
        terminal = Terminal(args, env=env)
        terminals.append(terminal)
        return terminal

    first = open_repl()
    asked = first.expect("[y/N] ")
    assert "helper: sh -c" in asked and "programs that run with your rights" in asked
    first.type("n")
    first.expect("not started (declined): helper")
    first.expect("› ")
    assert first.close() == 0 and not mark.exists()

    # The "no" is kept: the next start does not ask, and says why the server is missing.
    second = open_repl()
    shown = second.expect("› ")
    assert "[y/N]" not in shown and "not started (declined): helper" in shown
    assert second.close() == 0 and not mark.exists()

    run_drover(["mcp", "revoke", "--workdir", str(work)], env=env)
    third = open_repl()
    third.expect("[y/N] ")
    third.type("y")
    third.expect("› ")
    assert third.close() == 0 and mark.exists()

    mark.unlink()
    fourth = open_repl()
    assert "[y/N]" not in fourth.expect("› ")
    assert fourth.close() == 0 and mark.exists()


def test_serve_skips_unapproved_project_servers(
    fake_llm: FakeLLMServer, tmp_path: Path, work: Path
) -> None:
    from server.support import start_server

    mark = tmp_path / "ran"
    write_project(tmp_path / "work", cloned=mark)
    served = start_server(fake_llm, tmp_path, "--sandbox", "off", env=environment(tmp_path))
    try:
        with served.client() as c:
            assert c.post("/v1/sessions", json={}).status_code == 201
    finally:
        served.close()
    assert not mark.exists()
    assert any("not started (not approved): cloned" in line for line in served.stderr)


# -- the pieces ---------------------------------------------------------------------------------


def test_answers_are_keyed_by_workdir_and_content(tmp_path: Path, work: Path) -> None:
    approvals = Approvals(tmp_path / "answers.json")
    write_project(work, a=tmp_path / "a", b=tmp_path / "b")
    project = project_servers(work, Config(), approvals)
    assert project is not None
    assert (project.approved, project.undecided) == (frozenset(), ["a", "b"])

    async def yes(question: str) -> str:
        assert "a: sh -c" in question and "b: sh -c" in question
        return "y"

    after = asyncio.run(ask_once(project, yes, approvals))
    assert after.approved == {"a", "b"} and after.undecided == []
    again = project_servers(work, Config(), approvals)
    assert again is not None and again.approved == {"a", "b"}
    # Another workdir with the same file is another project.
    elsewhere = tmp_path / "clone"
    elsewhere.mkdir()
    (elsewhere / ".mcp.json").write_bytes((work / ".mcp.json").read_bytes())
    fresh = project_servers(elsewhere, Config(), approvals)
    assert fresh is not None and fresh.undecided == ["a", "b"]


def test_a_file_changed_after_its_approval_is_refused_not_run(tmp_path: Path, work: Path) -> None:
    path = write_project(work, a=tmp_path / "a")
    project = project_servers(work, Config(mcp_approve_project=True), Approvals(tmp_path / "x"))
    assert project is not None
    chosen = project.file()
    assert [c.name for c in load_servers([chosen])] == ["a"]
    path.write_text(path.read_text() + " ")
    with pytest.raises(ConfigError, match="changed while drover started"):
        load_servers([chosen])
    # Only the servers chosen are taken.
    assert load_servers([McpFile(path, servers=frozenset())]) == []
