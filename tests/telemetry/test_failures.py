"""What telemetry's own awaits leave when the journal fails there or the turn is cancelled
there: keeping a turn's traceparent, reading it back for a recovery, and the journal's commit
observer. Telemetry never fails a turn and never leaves one running."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from support.otlp import Collector

from drover import Agent
from drover.config.settings import Config
from drover.errors import StoreError
from drover.providers.anthropic import AnthropicProvider
from drover.runtime.runner import Runner
from drover.store.sqlite.store import SqliteStore
from drover.telemetry import Telemetry
from drover.telemetry.metrics import Metrics
from drover.testing.server import FakeLLMServer


class TraceFails(SqliteStore):
    """A real journal whose trace table fails (a lost connection, a full disk)."""

    async def record_turn_trace(self, turn_id: str, traceparent: str) -> None:
        raise StoreError("the disk is full")

    async def turn_trace(self, turn_id: str) -> str | None:
        raise StoreError("the disk is full")


class TraceWaits(SqliteStore):
    """A real journal whose trace write waits until the test lets it go on."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.entered = asyncio.Event()
        self.go_on = asyncio.Event()

    async def record_turn_trace(self, turn_id: str, traceparent: str) -> None:
        self.entered.set()
        await self.go_on.wait()
        await super().record_turn_trace(turn_id, traceparent)


def traced() -> Telemetry:
    telemetry = Telemetry.from_env(traces=True, metrics=Metrics())
    assert telemetry is not None
    return telemetry


async def test_a_journal_that_cannot_keep_the_trace_fails_no_turn(
    otel_env: Collector,
    fake_llm: FakeLLMServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_llm.script({"text": "fine"})
    telemetry = traced()
    provider = AnthropicProvider("claude-test", api_key="k", base_url=fake_llm.anthropic_base_url)
    store = TraceFails(str(tmp_path / "journal.db"))
    await store.open()
    try:
        async with Agent(
            provider, tools=[], store=store, config=Config(), telemetry=telemetry
        ) as agent:
            result = await agent.run("hello")
    finally:
        await store.close()
        await provider.aclose()
        await telemetry.aclose()
    assert result.status == "completed" and result.text == "fine"
    assert any("could not keep the trace" in r.getMessage() for r in caplog.records)
    spans = otel_env.wait_for(lambda s: any(x.name == "invoke_agent drover" for x in s))
    (turn,) = [s for s in spans if s.name == "invoke_agent drover"]
    assert turn.attributes["drover.turn.status"] == "completed"


async def test_a_turn_interrupted_while_its_trace_is_kept_is_ended_not_left_running(
    otel_env: Collector, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    telemetry = traced()
    provider = AnthropicProvider("claude-test", api_key="k", base_url=fake_llm.anthropic_base_url)
    store = TraceWaits(str(tmp_path / "journal.db"))
    await store.open()
    try:
        async with Agent(
            provider, tools=[], store=store, config=Config(), telemetry=telemetry
        ) as agent:
            session = await agent.session()
            running = session.start("hello")
            await asyncio.wait_for(store.entered.wait(), 60)
            running.interrupt()
            store.go_on.set()
            await running.finished()
            (turn,) = await store.turns(session.id)
    finally:
        await store.close()
        await provider.aclose()
        await telemetry.aclose()
    assert turn.status == "interrupted"  # never left running
    assert fake_llm.requests == []  # the model was never called
    spans = otel_env.wait_for(lambda s: any(x.name == "invoke_agent drover" for x in s))
    (span,) = [s for s in spans if s.name == "invoke_agent drover"]
    assert span.attributes["drover.turn.status"] == "interrupted" and not span.error


async def test_a_recovery_whose_trace_cannot_be_read_is_still_counted(
    otel_env: Collector, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    telemetry = traced()
    store = TraceFails(str(tmp_path / "journal.db"))
    await store.open()
    try:
        session = await store.create_session(workdir=str(tmp_path), model="anthropic:test")
        # A turn whose lease is already over: its process is gone.
        dead = await store.begin_turn(session.id, None, "gone-owner", 0.0)
        runner = Runner(store, telemetry=telemetry)
        found = await runner.recover()
        (turn,) = await store.turns(session.id)
    finally:
        await store.close()
        await telemetry.aclose()
    assert found == {dead.id: session.id}
    assert turn.status == "interrupted"
    assert telemetry.metrics is not None
    assert telemetry.metrics.takeovers._value.get() == 1
    assert any("could not trace the recovery" in r.getMessage() for r in caplog.records)


async def test_an_observer_that_fails_does_not_make_a_write_twice(
    fake_llm: FakeLLMServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(Metrics):
        def journal_committed(self, writes: int, seconds: float) -> None:
            raise RuntimeError("observer bug")

    fake_llm.script({"text": "fine"})
    provider = AnthropicProvider("claude-test", api_key="k", base_url=fake_llm.anthropic_base_url)
    try:
        async with Agent(
            provider,
            tools=[],
            store=str(tmp_path / "journal.db"),
            config=Config(),
            telemetry=Telemetry(metrics=Broken()),
        ) as agent:
            result = await agent.run("hello")
            events = await agent.store.events_after(result.session_id)
    finally:
        await provider.aclose()
    assert result.status == "completed"
    kinds = [e.type for e in events]
    assert kinds.count("done") == 1 and kinds.count("turn_started") == 1
    assert any("commit observer failed" in r.getMessage() for r in caplog.records)
    assert not any(
        r.levelno >= logging.ERROR and "could not" in r.getMessage() for r in caplog.records
    )
