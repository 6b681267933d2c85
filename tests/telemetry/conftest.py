"""Fixtures of the telemetry tests: a real OTLP/HTTP collector, and the process's OTLP variables
pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.otlp import Collector


@pytest.fixture
def collector() -> Iterator[Collector]:
    running = Collector()
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def otel_env(collector: Collector, monkeypatch: pytest.MonkeyPatch) -> Collector:
    """This process exports to ``collector`` (the SDK's exporter reads the variables)."""
    for name, value in collector.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    return collector
