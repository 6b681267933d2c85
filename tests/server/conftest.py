"""Fixtures of the server tests: ``serve`` starts a real ``drover serve`` on the fake LLM."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from drover.testing.server import FakeLLMServer

from .support import Served, start_server


@pytest.fixture
def serve(fake_llm: FakeLLMServer, tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """``serve(*flags)`` starts a server (stopped at teardown, SIGKILL if SIGTERM hangs)."""
    started: list[Served] = []

    def start(*flags: str) -> Served:
        served = start_server(fake_llm, tmp_path, *flags)
        started.append(served)
        return served

    yield start
    for served in started:
        served.close()
