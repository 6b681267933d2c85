"""Shared pieces for tool tests: a context in a temporary working directory, process probes."""

from __future__ import annotations

from pathlib import Path

import pytest

from drover.tools.base import ToolContext


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    return root.resolve()


@pytest.fixture
def ctx(workdir: Path) -> ToolContext:
    return ToolContext(workdir=workdir)
