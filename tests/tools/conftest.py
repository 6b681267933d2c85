"""Shared pieces for tool tests: a context in a temporary working directory, a real sandbox.

The sandbox tests run real bubblewrap. Where it is missing or cannot create namespaces they
skip with the reason (``-ra`` prints it in the summary); ``DROVER_REQUIRE_SANDBOX=1`` (CI, where
``scripts/ci-deps`` installs bubblewrap) turns that skip into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from drover.tools.base import ToolContext
from drover.tools.sandbox import SandboxStatus, probe_sandbox, sandbox_settings

REQUIRE_ENV = "DROVER_REQUIRE_SANDBOX"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    return root.resolve()


@pytest.fixture
def ctx(workdir: Path) -> ToolContext:
    return ToolContext(workdir=workdir)


SandboxFactory = Callable[..., SandboxStatus]


@pytest.fixture
def make_sandbox() -> SandboxFactory:
    """Probe a real bubblewrap sandbox with the given settings; skip (or fail under
    ``DROVER_REQUIRE_SANDBOX=1``) when this machine cannot run one."""

    def make(
        mode: str = "workdir",
        *,
        network: bool = False,
        writable: Iterable[str | Path] = (),
        hidden: Iterable[str | Path] = (),
        protected: Iterable[str | Path] = (),
        env: Iterable[str] = (),
        processes: int | None = None,
        memory: int | None = None,
    ) -> SandboxStatus:
        status = probe_sandbox(
            sandbox_settings(
                mode=mode,
                network=network,
                writable=writable,
                hidden=hidden,
                protected=protected,
                env=env,
                processes=processes,
                memory=memory,
            )
        )
        if not status.active:
            why = f"no working bubblewrap sandbox here: {status.reason}"
            if os.environ.get(REQUIRE_ENV) == "1":
                pytest.fail(f"{why} ({REQUIRE_ENV}=1)", pytrace=False)
            pytest.skip(f"{why} (run scripts/ci-deps as root to install bubblewrap)")
        return status

    return make


@pytest.fixture
def sandbox(make_sandbox: SandboxFactory) -> SandboxStatus:
    """The default sandbox: ``workdir`` mode, no network."""
    return make_sandbox()
