"""Project instructions: which AGENTS.md/CLAUDE.md files are read, in which order, and how they
join the system prompt between drover's prompt (or its replacement) and the appended text."""

from __future__ import annotations

from pathlib import Path

import pytest

from drover import Agent
from drover.agent.instructions import MAX_CHARS, PromptParts, find_instructions
from drover.testing.scripted import Reply, ScriptedProvider


def tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    """outside/ (not read) > repo/.git > repo/pkg > repo/pkg/app (the workdir); a user dir."""
    repo = tmp_path / "outside" / "repo"
    workdir = repo / "pkg" / "app"
    workdir.mkdir(parents=True)
    (repo / ".git").mkdir()
    (tmp_path / "outside" / "AGENTS.md").write_text("above the repository")
    (repo / "AGENTS.md").write_text("root rules")
    (repo / "CLAUDE.md").write_text("root claude (AGENTS.md wins)")
    (repo / "pkg" / "CLAUDE.md").write_text("package rules")
    (workdir / "AGENTS.md").write_text("app rules")
    user = tmp_path / "config"
    user.mkdir()
    (user / "AGENTS.md").write_text("my own habits")
    return repo, workdir, user


def test_the_workdir_then_its_parents_to_the_repository_root_then_the_users(
    tmp_path: Path,
) -> None:
    repo, workdir, user = tree(tmp_path)
    found = find_instructions(workdir, user)
    assert [(f.path, f.text, f.scope) for f in found] == [
        (workdir / "AGENTS.md", "app rules", "project"),
        (repo / "pkg" / "CLAUDE.md", "package rules", "project"),
        (repo / "AGENTS.md", "root rules", "project"),
        (user / "AGENTS.md", "my own habits", "user"),
    ]


def test_outside_a_repository_only_the_workdir_and_the_user(tmp_path: Path) -> None:
    workdir = tmp_path / "home" / "notes"
    workdir.mkdir(parents=True)
    (tmp_path / "home" / "AGENTS.md").write_text("not mine to read")
    (workdir / "CLAUDE.md").write_text("notes rules")
    found = find_instructions(workdir, tmp_path / "no-user-dir")
    assert [f.text for f in found] == ["notes rules"]


def test_a_big_file_is_cut_and_a_broken_one_skipped(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("x" * (MAX_CHARS + 10))
    user = tmp_path / "user"
    user.mkdir()
    (user / "AGENTS.md").write_bytes(b"\xff\xfe not text")
    [big] = find_instructions(tmp_path, user)
    assert big.truncated and len(big.text) == MAX_CHARS and big.chars == MAX_CHARS + 10
    prompt = PromptParts(base="base", files=(big,)).text()
    assert f"[cut: the file has {MAX_CHARS + 10:,} characters" in prompt


async def test_the_prompt_is_base_then_instructions_then_the_appended_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _repo, workdir, user = tree(tmp_path)
    monkeypatch.setenv("DROVER_CONFIG", str(user / "config.toml"))

    async def system_of(**options: object) -> str:
        provider = ScriptedProvider([Reply(text="ok")])
        async with Agent(provider, tools=[], store=":memory:", workdir=workdir, **options) as a:
            await a.run("hi")
        return provider.requests[0].system

    plain = await system_of()
    assert plain.startswith("You are drover") and "app rules" not in plain
    full = await system_of(instructions=True, append_system_prompt="APPENDED")
    assert full.startswith("You are drover")
    parts = ("app rules", "package rules", "root rules", "my own habits", "APPENDED")
    order = [full.index(t) for t in parts]
    assert order == sorted(order)
    assert f"# Instructions from {workdir / 'AGENTS.md'}" in full
    assert "above the repository" not in full
    replaced = await system_of(system_prompt="ONLY THIS", instructions=True)
    assert replaced.startswith("ONLY THIS") and "You are drover" not in replaced
    assert "app rules" in replaced
