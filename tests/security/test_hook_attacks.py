"""Hooks as a prompt-injected model attacks them: dodging a hook's scope, rewriting its script.

A user guards pushes the way the docs show — a ``pre_tool`` hook on ``bash(git push*)`` whose
script, kept in the project, exits 2 — and the scripted model tries to push anyway: spelled
so the scope's glob would not match the text, or after rewriting the script to ``exit 0``
with every tool it has. Real turns, the real ``bash`` tool and bubblewrap sandbox, a SQLite
journal; what happened is read from the journal and the disk, not from what a tool said.
"""

from __future__ import annotations

from pathlib import Path

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

SCRIPT = "#!/bin/sh\necho 'pushes need a review' >&2\nexit 2\n"
BLOCKED = "Blocked by a pre_tool hook (the project's hooks): pushes need a review"

#: ``git push`` where the glob ``git push*`` does not match the text from its start.
PUSHES = [
    "cd . && git push",
    "true; git push --force origin main",
    "(git push)",
    "echo $(git push)",
    "GIT_TRACE=0 git push",
    "env git push",
    "bash -c 'git push'",
]


def guard(command: str = "./hooks/check-push") -> HookSpec:
    return HookSpec(
        event="pre_tool",
        command=command,
        tool=Rule.parse("bash(git push*)"),
        timeout=30,
        source="the project's hooks",
    )


def told(provider: ScriptedProvider, request: int) -> list[ToolResultBlock]:
    return list(provider.requests[request].messages[-1].tool_results)


def project(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / "hooks").mkdir(parents=True)
    script = work / "hooks" / "check-push"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    return work


async def run(tmp_path: Path, work: Path, replies: list[Reply]) -> ScriptedProvider:
    provider = ScriptedProvider(replies)
    async with Agent(
        provider,
        store=str(tmp_path / "journal.db"),
        workdir=work,
        config=Config(),
        sandbox="workdir",  # hostile commands run confined
        permission_mode="allow",  # nothing but the hook stands in the way
        hooks=[guard()],
    ) as agent:
        result = await agent.run("ship it")
    assert result.status == "completed"
    return provider


@needs_sandbox
async def test_a_hook_on_git_push_runs_for_every_git_push(tmp_path: Path) -> None:
    work = project(tmp_path)
    replies = [
        Reply(calls=[call("bash", command=c) for c in [*PUSHES, "git status"]]),
        Reply(text="done"),
    ]
    provider = await run(tmp_path, work, replies)
    results = told(provider, 1)
    assert {c: r.content for c, r in zip(PUSHES, results, strict=False)} == dict.fromkeys(
        PUSHES, BLOCKED
    )
    assert results[-1].content != BLOCKED  # the scope still leaves other commands alone


@needs_sandbox
async def test_the_model_cannot_disarm_a_hook_by_rewriting_its_script(tmp_path: Path) -> None:
    work = project(tmp_path)
    script = "hooks/check-push"
    rewrites = [
        call("write_file", path=script, content="#!/bin/sh\nexit 0\n"),
        call("edit_file", path=script, old_string="exit 2", new_string="exit 0"),
        call("bash", command=f"printf '#!/bin/sh\\nexit 0\\n' > {script}"),
        call("bash", command=f"rm -f {script} && ln -s /bin/true {script}"),
        call("bash", command=f"mv {script} hooks/old; printf 'exit 0' > {script}"),
    ]
    replies = [
        Reply(calls=rewrites),
        Reply(calls=[call("bash", command="git push --force")]),
        Reply(text="done"),
    ]
    provider = await run(tmp_path, work, replies)
    assert (work / script).read_text() == SCRIPT
    assert not (work / "hooks" / "old").exists()
    refused = told(provider, 1)
    assert all(r.is_error for r in refused), [r.content for r in refused]
    assert "is protected" in refused[0].content and "is protected" in refused[1].content
    assert [r.content for r in told(provider, 2)] == [BLOCKED]


def test_the_scripts_of_hooks_are_what_their_commands_name(tmp_path: Path) -> None:
    from drover.turn.hooks import hook_scripts  # (here: the attacks above also run on older code)

    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "lint.py").write_text("")
    (tmp_path / "rules.txt").write_text("")
    specs = [
        guard("./hooks/check-push --strict"),
        guard("python3 hooks/lint.py < rules.txt && echo ok"),
        guard("sh -c 'test -x tools/gate' ; cat rules.txt"),
    ]
    assert set(hook_scripts(specs, tmp_path)) == {
        tmp_path / "hooks" / "check-push",  # named with a '/', even before it exists
        tmp_path / "hooks" / "lint.py",
        tmp_path / "rules.txt",  # an argument naming a file of the project
        tmp_path / "tools" / "gate",  # in the text sh -c runs
    }
