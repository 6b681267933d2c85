"""A rewind never reads, writes or deletes outside the working directory: a directory a turn
wrote into, replaced since by a symbolic link (to a directory outside — a user's home, their
``.ssh`` — or elsewhere inside), makes the file unreachable: a dry run shows nothing of what
the link leads to, and a rewind, forced or not, leaves it alone and names it unrestorable.
What a rewind opens is checked to be what it resolved, so a link swapped in between is
refused too."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from server.support import BOUND, start_server

from drover import Agent
from drover.cli.repl.control import rewind_command
from drover.config.settings import Config
from drover.errors import ToolError
from drover.testing.scripted import Reply, ScriptedProvider, call
from drover.testing.server import FakeLLMServer
from drover.tools.builtin.files import edit_file, read_bytes, remove_file, write_file

#: What the files outside the working directory hold; nothing may show or change it.
CANARY = "PRIVATE KEY outside-canary"


def scene(tmp_path: Path) -> tuple[Path, Path]:
    """The working directory and a directory outside it holding the canary files."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    for name in ("id_rsa", ".bashrc", "settings"):
        (outside / name).write_text(CANARY)
    return work, outside


def agent_for(provider: ScriptedProvider, tmp_path: Path) -> Agent:
    return Agent(
        provider,
        tools=[write_file, edit_file],
        store=str(tmp_path / "journal.db"),
        workdir=tmp_path / "work",
        config=Config(),
        permission_mode="allow",
    )


def relink(directory: Path, target: Path) -> None:
    """Replace ``directory`` (and what a turn wrote in it) by a symbolic link to ``target``."""
    for child in directory.iterdir():
        child.unlink()
    directory.rmdir()
    directory.symlink_to(target, target_is_directory=True)


def untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == [".bashrc", "id_rsa", "settings"]
    assert all(p.read_text() == CANARY for p in outside.iterdir())


@pytest.mark.parametrize("force", [False, True])
async def test_a_created_file_behind_a_relinked_directory_is_not_deleted_outside(
    tmp_path: Path, force: bool
) -> None:
    """The turn created ``home/.bashrc`` and ``keys/id_rsa``; ``home`` and ``keys`` became links
    to a directory outside. A rewind would delete what they now lead to."""
    work, outside = scene(tmp_path)
    provider = ScriptedProvider(
        [
            Reply(
                calls=[
                    call("write_file", path="home/.bashrc", content="mine\n"),
                    call("write_file", path="keys/id_rsa", content="mine\n"),
                    call("write_file", path="plain.txt", content="mine\n"),
                ]
            ),
            Reply(text="written"),
        ]
    )
    async with agent_for(provider, tmp_path) as agent:
        done = await agent.run("write them")
        relink(work / "home", outside)
        relink(work / "keys", outside)

        plan = await agent.plan_rewind(done.session_id, done.turn_id)
        actions = {f.shown: f.action for f in plan.files}
        assert actions == {
            "home/.bashrc": "unreachable",
            "keys/id_rsa": "unreachable",
            "plain.txt": "delete",
        }
        assert CANARY not in plan.diff()
        assert all(f.current is None for f in plan.files if f.action == "unreachable")
        assert plan.conflicts == ()

        result = await agent.rewind(done.session_id, done.turn_id, force=force)
        assert result.restored == ("plain.txt",)
        assert sorted(result.unrestorable) == ["home/.bashrc", "keys/id_rsa"]
        assert not (work / "plain.txt").exists()
    untouched(outside)


async def test_the_repl_says_why_it_leaves_the_file_and_shows_nothing_of_it(
    tmp_path: Path,
) -> None:
    work, outside = scene(tmp_path)
    provider = ScriptedProvider(
        [Reply(calls=[call("write_file", path="keys/id_rsa", content="mine\n")]), Reply(text="ok")]
    )
    async with agent_for(provider, tmp_path) as agent:
        done = await agent.run("write it")
        relink(work / "keys", outside)
        session = await agent.session(done.session_id)
        shown: list[tuple[str, str]] = []

        async def refuse(question: str) -> bool:
            return False

        await rewind_command(agent, session, "1 --force", refuse, shown.extend)
    lines = [text for text, _ in shown]
    assert "cannot restore keys/id_rsa: it now lies behind a symbolic link (left alone)" in lines
    assert not any(CANARY in line for line in lines)
    untouched(outside)


async def test_an_edited_file_behind_a_relinked_directory_is_not_overwritten_outside(
    tmp_path: Path,
) -> None:
    """The turn edited ``conf/settings`` (its content before is kept); ``conf`` became a link to a
    directory outside holding a ``settings`` of its own. A forced rewind would overwrite it."""
    work, outside = scene(tmp_path)
    (work / "conf").mkdir()
    (work / "conf/settings").write_text("before\n")
    provider = ScriptedProvider(
        [
            Reply(
                calls=[call("edit_file", path="conf/settings", old_string="before", new_string="x")]
            ),
            Reply(text="edited"),
        ]
    )
    async with agent_for(provider, tmp_path) as agent:
        done = await agent.run("edit it")
        relink(work / "conf", outside)
        plan = await agent.plan_rewind(done.session_id, done.turn_id)
        assert [(f.shown, f.action) for f in plan.files] == [("conf/settings", "unreachable")]
        assert CANARY not in plan.diff()
        result = await agent.rewind(done.session_id, done.turn_id, force=True)
        assert result.restored == () and result.unrestorable == ("conf/settings",)
        assert len(result.rewound) == 1  # the conversation goes back all the same
    untouched(outside)


async def test_a_link_to_elsewhere_inside_is_not_followed_either(tmp_path: Path) -> None:
    """``data`` became a link to ``other/`` inside the working directory: ``other/notes.txt`` is
    another file than the one the turn wrote, and stays."""
    work, _ = scene(tmp_path)
    provider = ScriptedProvider(
        [
            Reply(calls=[call("write_file", path="data/notes.txt", content="mine\n")]),
            Reply(text="ok"),
        ]
    )
    async with agent_for(provider, tmp_path) as agent:
        done = await agent.run("write it")
        (work / "other").mkdir()
        (work / "other/notes.txt").write_text("someone else's\n")
        relink(work / "data", work / "other")
        result = await agent.rewind(done.session_id, done.turn_id, force=True)
        assert result.unrestorable == ("data/notes.txt",)
    assert (work / "other/notes.txt").read_text() == "someone else's\n"


def test_what_a_rewind_opens_must_be_what_it_resolved(tmp_path: Path) -> None:
    """A link swapped in after the path was resolved (here: already there when the file is
    opened): reading and deleting through it are refused, not followed."""
    work, outside = scene(tmp_path)
    (outside / "sub").mkdir()
    (outside / "sub/id_rsa").write_text(CANARY)
    (work / "keys").symlink_to(outside, target_is_directory=True)
    # The paths as resolved before the swap, ``keys`` a plain directory then: the link is the
    # file's directory, or one above it.
    for path in (work.resolve() / "keys/id_rsa", work.resolve() / "keys/sub/id_rsa"):
        with pytest.raises(ToolError, match="changed while being opened"):
            read_bytes(path)
        with pytest.raises(ToolError, match="changed while being deleted"):
            remove_file(path, "keys/id_rsa")
    assert (outside / "sub/id_rsa").read_text() == CANARY
    (outside / "sub/id_rsa").unlink()
    (outside / "sub").rmdir()
    untouched(outside)


def test_a_dry_run_over_http_shows_nothing_outside(fake: FakeLLMServer, tmp_path: Path) -> None:
    """A token holder's dry run showed the diff of the server user's key file, reached through
    a directory the turn wrote into and that became a link; the rewind then deleted it."""
    _, outside = scene(tmp_path)
    served = start_server(fake, tmp_path)
    try:
        fake.script(
            {
                "text": "Writing.",
                "tool_calls": [
                    {"name": "write_file", "input": {"path": "ssh/id_rsa", "content": "mine"}}
                ],
            },
            {"text": "written"},
        )
        with served.client() as c:
            sid = c.post("/v1/sessions", json={}).json()["id"]
            sent = c.post(f"/v1/sessions/{sid}/messages", json={"content": "go"})
            assert sent.status_code == 202, sent.text
            turn_id = sent.json()["turn_id"]
            deadline = time.monotonic() + BOUND
            while c.get(f"/v1/sessions/{sid}").json()["turns"][0]["status"] == "running":
                assert time.monotonic() < deadline, "the turn never ended"
                time.sleep(0.02)  # the turn runs in the server: look again
            relink(tmp_path / "work" / "ssh", outside)

            dry = c.post(f"/v1/sessions/{sid}/rewind", json={"turn_id": turn_id, "dry_run": True})
            assert dry.status_code == 200, dry.text
            assert CANARY not in dry.text
            assert dry.json()["files"] == [
                {"path": "ssh/id_rsa", "action": "unreachable", "conflict": False}
            ]
            assert dry.json()["unrestorable"] == ["ssh/id_rsa"]

            done = c.post(f"/v1/sessions/{sid}/rewind", json={"turn_id": turn_id, "force": True})
            assert done.status_code == 200, done.text
            assert done.json()["restored"] == [] and done.json()["rewound"] == [turn_id]
    finally:
        served.close()
    untouched(outside)
