"""Protected paths: what counts as a write to one, and the placeholders that keep missing ones
from being created (their life across overlapping calls and after a killed drover)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from drover.errors import ToolError
from drover.tools.protect import PROTECTED_NAMES, is_placeholder, writes_protected
from drover.tools.sandbox import SandboxSettings, SandboxStatus

WRITES = [
    "git config core.fsmonitor 'touch /tmp/x'",
    "git -C sub config core.hooksPath hooks",
    "git commit -qm wip",
    "git add . && git commit -m x",
    "/usr/bin/git init",
    "echo $(git stash)",
    "`git checkout -b x`",
    "make && git push",
    "echo 'curl x | sh' > .envrc",
    "cat > .git/hooks/pre-commit",
    "cd .git && ls",
    "cp x .mcp.json",
    "mkdir -p .drover",
    "hg commit -m x",
    "svn add file",
    "echo 'unbalanced",
]
READS = [
    "ls -la",
    "git status --short",
    "git diff HEAD~1 -- src",
    "git log --oneline | head -5",
    "git -C sub show HEAD:README.md",
    "git config --get user.name",
    "cat .gitignore",
    "ls .github/workflows",
    "python -m pytest -q",
    "grep -rn digit src",
    "hg status",
]


@pytest.mark.parametrize("command", WRITES)
def test_commands_that_may_write_a_protected_path(command: str) -> None:
    assert writes_protected(command)


@pytest.mark.parametrize("command", READS)
def test_commands_that_do_not(command: str) -> None:
    assert not writes_protected(command)


def test_names_from_the_config_count_too() -> None:
    assert not writes_protected("echo x > .husky/pre-commit")
    assert writes_protected("echo x > .husky/pre-commit", [*PROTECTED_NAMES, ".husky"])


def present(workdir: Path) -> list[str]:
    """The protected names that exist in ``workdir`` (as anything, links included)."""
    return [name for name in PROTECTED_NAMES if os.path.lexists(workdir / name)]


def status(**settings: object) -> SandboxStatus:
    """An active status; launch() only builds the command line, nothing runs."""
    return SandboxStatus(
        settings=SandboxSettings(**settings),  # type: ignore[arg-type]
        active=True,
        bwrap="/usr/bin/bwrap",
    )


async def test_placeholders_last_until_the_last_overlapping_call_ends(workdir: Path) -> None:
    sandbox = status()
    async with sandbox.launch(["true"], workdir) as first:
        for name in PROTECTED_NAMES:
            assert is_placeholder(workdir / name)
            assert ["--ro-bind", str(workdir / name), str(workdir / name)] == first[
                first.index(str(workdir / name)) - 1 : first.index(str(workdir / name)) + 2
            ]
        async with sandbox.launch(["true"], workdir):
            pass
        # The second call ended while the first runs: its mounts still need the placeholders.
        assert all(is_placeholder(workdir / name) for name in PROTECTED_NAMES)
    assert present(workdir) == []


async def test_placeholders_a_killed_drover_left_are_removed_and_nothing_else(
    workdir: Path,
) -> None:
    left = workdir / ".envrc"
    left.mkdir(mode=0o555)
    os.utime(left, (0, 0))
    (workdir / ".drover").mkdir(mode=0o555)  # the user's own, empty and read-only: it stays
    async with status().launch(["true"], workdir):
        pass
    assert not left.exists()
    assert (workdir / ".drover").is_dir()


async def test_placeholders_block_a_missing_path_below_an_existing_directory(
    workdir: Path,
) -> None:
    (workdir / "deploy").mkdir()
    sandbox = status(protected=(workdir / "deploy" / "keys" / "prod.pem",))
    async with sandbox.launch(["true"], workdir) as argv:
        assert is_placeholder(workdir / "deploy" / "keys")
        assert str(workdir / "deploy" / "keys") in argv
    assert not (workdir / "deploy" / "keys").exists()
    assert (workdir / "deploy").is_dir()


async def test_a_protected_path_that_is_a_symlink_refuses_commands(
    workdir: Path, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere.git").mkdir()
    (workdir / ".git").symlink_to(tmp_path / "elsewhere.git")
    with pytest.raises(ToolError, match=r"\.git is a symbolic link"):
        async with status().launch(["true"], workdir):
            pass
    # Listed as writable by the user: no longer protected, so no longer refused.
    async with status(writable=(workdir / ".git",)).launch(["true"], workdir) as argv:
        assert str(workdir / ".git") not in argv
        assert str(workdir / ".envrc") in argv  # the others still are


async def test_read_only_mode_needs_no_protection(workdir: Path) -> None:
    async with status(mode="read-only").launch(["true"], workdir) as argv:
        assert present(workdir) == []
        assert str(workdir / ".git") not in argv
