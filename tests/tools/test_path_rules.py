"""The file and search tools honour the sandbox's hidden and protected paths inside the workdir,
through symbolic links, hard links and links swapped in while a file is opened."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from drover.errors import PathEscapeError, ToolError
from drover.tools.base import Tool, ToolContext
from drover.tools.builtin import builtin_tools
from drover.tools.builtin.files import _write_text
from drover.tools.sandbox import SandboxSettings, SandboxStatus, sandbox_settings


def tools_for(settings: SandboxSettings) -> dict[str, Tool]:
    status = SandboxStatus(settings=settings, active=True, bwrap="/usr/bin/bwrap")
    return {t.name: t for t in builtin_tools(sandbox=status)}


@pytest.fixture
def planted(workdir: Path) -> Path:
    """A workdir with a hidden file, a hidden directory and a repository's .git."""
    (workdir / "config").mkdir()
    (workdir / "config" / "prod.env").write_text("TOKEN=hidden-secret-1\n")
    (workdir / "vault").mkdir()
    (workdir / "vault" / "key.pem").write_text("hidden-secret-2\n")
    (workdir / ".git" / "hooks").mkdir(parents=True)
    (workdir / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (workdir / "notes.txt").write_text("hidden-secret is mentioned here only by name\n")
    return workdir


@pytest.fixture
def tools(planted: Path) -> dict[str, Tool]:
    return tools_for(
        sandbox_settings(
            mode="workdir", network=False, hidden=["config/prod.env", "vault"], base=planted
        )
    )


async def test_hidden_paths_are_not_read_listed_searched_or_written(
    tools: dict[str, Tool], ctx: ToolContext
) -> None:
    for path in ("config/prod.env", "vault/key.pem", "./config/../config/prod.env"):
        with pytest.raises(ToolError, match="is hidden from tools on purpose"):
            await tools["read_file"].run({"path": path}, ctx)
    with pytest.raises(ToolError, match="is hidden from tools on purpose"):
        await tools["write_file"].run({"path": "vault/new.pem", "content": "x"}, ctx)
    listed = await tools["glob"].run({"pattern": "**/*"}, ctx)
    assert "prod.env" not in listed.content and "vault" not in listed.content
    assert "notes.txt" in listed.content
    found = await tools["grep"].run({"pattern": "hidden-secret"}, ctx)
    assert found.content == "notes.txt:1:hidden-secret is mentioned here only by name"
    with pytest.raises(ToolError, match="is hidden from tools on purpose"):
        await tools["grep"].run({"pattern": "x", "path": "vault"}, ctx)


async def test_a_symlink_to_a_hidden_path_is_not_followed(
    tools: dict[str, Tool], ctx: ToolContext, planted: Path
) -> None:
    (planted / "innocent.txt").symlink_to(planted / "config" / "prod.env")
    (planted / "box").symlink_to(planted / "vault")
    with pytest.raises(ToolError, match="is hidden from tools on purpose"):
        await tools["read_file"].run({"path": "innocent.txt"}, ctx)
    with pytest.raises(ToolError, match="is hidden from tools on purpose"):
        await tools["read_file"].run({"path": "box/key.pem"}, ctx)
    found = await tools["grep"].run({"pattern": "hidden-secret-[0-9]"}, ctx)
    assert found.content.startswith("No matches"), found.content
    listed = await tools["glob"].run({"pattern": "*"}, ctx)
    assert "innocent.txt" not in listed.content and "box" not in listed.content


async def test_protected_paths_are_read_but_not_written(
    tools: dict[str, Tool], ctx: ToolContext, planted: Path
) -> None:
    out = await tools["read_file"].run({"path": ".git/config"}, ctx)
    assert "bare = false" in out.content
    attempts = [
        ("write_file", {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\nevil\n"}),
        ("write_file", {"path": ".envrc", "content": "evil\n"}),
        ("write_file", {"path": ".mcp.json", "content": "{}"}),
        ("write_file", {"path": ".drover/settings.toml", "content": "x"}),
        (
            "edit_file",
            {"path": ".git/config", "old_string": "bare = false", "new_string": "fsmonitor = x"},
        ),
    ]
    for name, args in attempts:
        with pytest.raises(ToolError, match="is protected: "):
            await tools[name].run(args, ctx)
    assert not (planted / ".git" / "hooks" / "pre-commit").exists()
    assert not (planted / ".envrc").exists()
    assert (planted / ".git" / "config").read_text() == "[core]\n\tbare = false\n"


async def test_a_symlink_to_a_protected_path_is_not_written_through(
    tools: dict[str, Tool], ctx: ToolContext, planted: Path
) -> None:
    (planted / "settings.ini").symlink_to(".git/config")
    (planted / "scripts").symlink_to(".git/hooks")
    with pytest.raises(ToolError, match=re.escape("is protected: .git")):
        await tools["edit_file"].run(
            {"path": "settings.ini", "old_string": "bare = false", "new_string": "x"}, ctx
        )
    with pytest.raises(ToolError, match=re.escape("is protected: .git")):
        await tools["write_file"].run({"path": "scripts/post-checkout", "content": "x"}, ctx)
    assert not (planted / ".git" / "hooks" / "post-checkout").exists()


async def test_config_protected_and_released_paths(workdir: Path, ctx: ToolContext) -> None:
    (workdir / ".git").mkdir()
    settings = sandbox_settings(
        mode="workdir",
        network=False,
        protected=[".husky"],
        writable=[workdir / ".git"],
        base=workdir,
    )
    tools = tools_for(settings)
    with pytest.raises(ToolError, match=re.escape("is protected: .husky")):
        await tools["write_file"].run({"path": ".husky/pre-commit", "content": "x"}, ctx)
    # .git listed as writable by the user: no longer protected.
    await tools["write_file"].run({"path": ".git/description", "content": "mine\n"}, ctx)
    assert (workdir / ".git" / "description").read_text() == "mine\n"


async def test_a_symlink_out_of_the_workdir_is_refused(
    tools: dict[str, Tool], ctx: ToolContext, planted: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("outside-secret\n")
    (planted / "link.txt").symlink_to(outside)
    with pytest.raises(PathEscapeError):
        await tools["read_file"].run({"path": "link.txt"}, ctx)
    with pytest.raises(PathEscapeError):
        await tools["write_file"].run({"path": "link.txt", "content": "x"}, ctx)
    assert outside.read_text() == "outside-secret\n"


async def test_hard_linked_files_are_read_but_not_written(
    tools: dict[str, Tool], ctx: ToolContext, planted: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("outside-original\n")
    os.link(outside, planted / "linked.txt")
    out = await tools["read_file"].run({"path": "linked.txt"}, ctx)
    assert out.content == "outside-original\n"
    with pytest.raises(ToolError, match=re.escape("'linked.txt' has 2 hard links")):
        await tools["write_file"].run({"path": "linked.txt", "content": "changed\n"}, ctx)
    with pytest.raises(ToolError, match=re.escape("'linked.txt' has 2 hard links")):
        await tools["edit_file"].run(
            {"path": "linked.txt", "old_string": "original", "new_string": "changed"}, ctx
        )
    assert outside.read_text() == "outside-original\n"


def test_a_link_swapped_in_after_the_check_is_refused(workdir: Path, tmp_path: Path) -> None:
    """What a command running in parallel could do between the check and the open."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.txt").write_text("outside-original\n")
    checked = workdir / "target.txt"
    checked.symlink_to(outside / "target.txt")  # was a plain file when it was checked
    with pytest.raises(ToolError, match="became a symbolic link"):
        _write_text(checked, "target.txt", "changed\n")
    assert (outside / "target.txt").read_text() == "outside-original\n"
    # A directory on the way replaced by a link: the file opened is not the one checked, and
    # the file the open created over there is taken back.
    (workdir / "sub").symlink_to(outside)
    with pytest.raises(ToolError, match="changed while being opened"):
        _write_text(workdir / "sub" / "new.txt", "sub/new.txt", "x")
    assert not (outside / "new.txt").exists()
