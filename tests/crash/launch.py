"""Starting drover processes for the crash tests: the literal command line or a fork server
(:mod:`support.forkserver`).

See :mod:`tests.crash.conftest` for why a fork server exists and what it shares.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from support.forkserver import ForkServer

#: Failure bound of every wait (an interpreter start alone takes seconds on a loaded machine).
DEADLINE = 90.0
#: How often file and database conditions are re-checked while waiting for them.
POLL_INTERVAL = 0.01
#: Tail of stderr quoted in failure messages.
STDERR_TAIL = 3000
#: ``exec`` starts every run as ``python -m drover.cli.main``; anything else uses the fork server
#: except for the runs that ask for ``exec``.
SPAWN_ENV = "DROVER_CRASH_SPAWN"


def drover_env(scratch: Path) -> dict[str, str]:
    """The environment of a drover process: test keys, no user config, no stray settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DROVER_", "ANTHROPIC_", "OPENAI_", "PYTEST_"))
    }
    env["ANTHROPIC_API_KEY"] = "test"
    env["OPENAI_API_KEY"] = "test"
    env["DROVER_CONFIG"] = str(scratch / "no-config.toml")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def drover_argv(
    prompt: str,
    *,
    base_url: str,
    db: Path,
    session: str,
    workdir: Path,
    model: str = "anthropic:test",
    permission_mode: str = "allow",
    output_format: str = "stream-json",
) -> list[str]:
    return [
        "-p",
        prompt,
        "--model",
        model,
        "--base-url",
        base_url,
        "--db",
        str(db),
        "--session",
        session,
        "--workdir",
        str(workdir),
        "--permission-mode",
        permission_mode,
        "--output-format",
        output_format,
    ]


# -- starting processes -----------------------------------------------------------------------


class Child(Protocol):
    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal), or None while it runs."""

    def wait(self, timeout: float) -> int: ...


class Launcher(Protocol):
    name: str

    def spawn(
        self, argv: Sequence[str], env: Mapping[str, str], stdin: int, stdout: int, stderr: int
    ) -> Child:
        """Start ``drover ARGV`` with these file descriptors as its standard streams."""


class _ExecChild:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    @property
    def pid(self) -> int:
        return self._proc.pid

    def poll(self) -> int | None:
        return self._proc.poll()

    def wait(self, timeout: float) -> int:
        return self._proc.wait(timeout)


class ExecLauncher:
    """``python -m drover.cli.main ARGV``: the literal command line."""

    name = "exec"

    def spawn(
        self, argv: Sequence[str], env: Mapping[str, str], stdin: int, stdout: int, stderr: int
    ) -> Child:
        proc = subprocess.Popen(
            [sys.executable, "-m", "drover.cli.main", *argv],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env),
        )
        return _ExecChild(proc)


def launcher_for(spawn: str, fork_server: ForkServer) -> Launcher:
    if spawn == "exec" or os.environ.get(SPAWN_ENV) == "exec":
        return ExecLauncher()
    return fork_server
