"""A prompt-injected model, for the sandbox attacks: the scripted provider issues the hostile
``bash`` calls in one turn of a real :class:`~drover.Agent` (its built-in tools, its sandbox
probed as ``drover -p`` probes it, a real SQLite journal), and the test reads what each command
printed, as the model would. :func:`headless` runs a real ``drover -p`` process instead."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from drover import Agent
from drover.config.settings import Config
from drover.core.messages import ToolResultBlock
from drover.testing.scripted import Reply, ScriptedProvider, call

REQUIRE_ENV = "DROVER_REQUIRE_SANDBOX"


@dataclass(frozen=True)
class Outcome:
    """What the model was told about each command, in order."""

    results: list[ToolResultBlock]

    @property
    def texts(self) -> list[str]:
        return [r.content for r in self.results]


async def hostile_turn(
    tmp_path: Path,
    commands: Sequence[str],
    *,
    workdir: Path | None = None,
    config: Config | None = None,
    permission_mode: str = "sandboxed",
    sandbox_network: bool = False,
    allow_domains: Sequence[str] = (),
) -> Outcome:
    """One turn whose model runs ``commands`` as parallel ``bash`` calls; the results."""
    provider = ScriptedProvider(
        [
            Reply(calls=[call("bash", command=c) for c in commands]),
            Reply(text="done"),
        ]
    )
    if workdir is None:
        workdir = tmp_path / "work"
        workdir.mkdir(exist_ok=True)
    agent = Agent(
        provider,
        store=str(tmp_path / "journal.db"),
        workdir=workdir,
        permission_mode=permission_mode,  # type: ignore[arg-type]
        config=config or Config(),
        sandbox_network=sandbox_network,
        sandbox_allow_domains=allow_domains,
    )
    async with agent:
        status = agent.sandbox
        if status is None or not status.active:
            why = f"no working bubblewrap sandbox here: {status and status.reason}"
            if os.environ.get(REQUIRE_ENV) == "1":
                pytest.fail(f"{why} ({REQUIRE_ENV}=1)", pytrace=False)
            pytest.skip(why)
        await agent.run("summarise the README")
    assert len(provider.requests) == 2, "the model was not called back with the results"
    return Outcome(list(provider.requests[1].messages[-1].tool_results))


def headless(args: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``drover ARGS`` as a process of its own, no terminal, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "drover.cli.main", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
