"""Traces of real turns, exported over OTLP/HTTP to a collector the test runs and decoded with
``opentelemetry-proto``: a tool turn, a model call that fails after retries, a cancelled turn,
workers of a ``task`` call, a continued turn's link, a request's parent, and nothing at all
when telemetry is off."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from support.otlp import Collector, Span, children

from drover import Agent, ToolContext, tool
from drover.config.settings import Config
from drover.core.sinks import EventRecorder
from drover.providers.anthropic import AnthropicProvider
from drover.store.sqlite.store import SqliteStore
from drover.telemetry import Telemetry
from drover.testing.server import FakeLLMServer
from drover.tools.base import Tool

SECRET = "sk-ant-api03-" + "x" * 40  # what the journal's redactor replaces


@tool(read_only=True)
async def word_count(ctx: ToolContext, text: str) -> str:
    """Count the words of a text."""
    return str(len(text.split()))


@asynccontextmanager
async def traced_agent(
    fake: FakeLLMServer, tmp: Path, tools: list[Tool] | None, *, capture: bool = False
) -> AsyncIterator[tuple[Agent, Telemetry]]:
    """An agent on the fake LLM (its retries quick), tracing to the collector the process's
    variables name (``tools`` None: the built-in ones and ``task``); the telemetry is closed
    (spans flushed) on the way out."""
    environ = dict(os.environ)
    if capture:
        environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
    telemetry = Telemetry.from_env(traces=True, environ=environ)
    assert telemetry is not None and telemetry.tracing
    provider = AnthropicProvider(
        "claude-test", api_key="k", base_url=fake.anthropic_base_url, backoff_base=0.001
    )
    try:
        agent = Agent(
            provider,
            tools=tools,
            store=str(tmp / "journal.db"),
            workdir=tmp,
            permission_mode="allow",
            config=Config(),
            telemetry=telemetry,
        )
        async with agent:
            yield agent, telemetry
    finally:
        await telemetry.aclose()
        await provider.aclose()


def one(spans: list[Span], name: str) -> Span:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


async def stored_trace(db: Path, turn_id: str) -> str | None:
    async with SqliteStore(str(db)) as store:
        return await store.turn_trace(turn_id)


async def test_a_tool_turn_is_a_turn_span_with_model_and_tool_calls(
    otel_env: Collector, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {
            "text": "Counting.",
            "tool_calls": [{"name": "word_count", "input": {"text": f"a b {SECRET}"}}],
            "usage": {"input_tokens": 30, "output_tokens": 7},
        },
        {"text": "That is 3 words.", "usage": {"input_tokens": 50, "output_tokens": 5}},
    )
    async with traced_agent(fake_llm, tmp_path, [word_count], capture=True) as (agent, _):
        result = await agent.run(f"How many words in 'a b {SECRET}'?")
        calls = await agent.store.tool_calls(result.turn_id)
    assert result.status == "completed"
    spans = otel_env.wait_for(lambda s: any(x.name == "invoke_agent drover" for x in s))

    turn = one(spans, "invoke_agent drover")
    assert turn.parent_id == ""  # started by no one traced
    assert turn.service == "drover-test"
    attrs = turn.attributes
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.provider.name"] == "anthropic"
    assert attrs["drover.turn.state.id"] == attrs["gen_ai.conversation.id"] == result.session_id
    assert attrs["drover.turn.id"] == result.turn_id
    assert attrs["drover.turn.status"] == "completed"
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (80, 12)
    assert not turn.error

    chats = sorted(children(spans, turn), key=lambda s: s.start_ns)
    models = [s for s in chats if s.name == "chat claude-test"]
    assert [m.attributes["drover.step"] for m in models] == [1, 2]
    for model, tokens in zip(models, [(30, 7), (50, 5)], strict=True):
        assert model.kind == 3  # CLIENT
        assert model.attributes["gen_ai.operation.name"] == "chat"
        assert model.attributes["gen_ai.request.model"] == "claude-test"
        assert model.attributes["gen_ai.response.time_to_first_chunk"] >= 0
        got = (model.attributes["gen_ai.usage.input_tokens"],)
        got += (model.attributes["gen_ai.usage.output_tokens"],)
        assert got == tokens
        assert not model.error

    (call,) = calls
    tool_span = one(spans, "execute_tool word_count")
    assert tool_span.parent_id == turn.span_id
    assert tool_span.attributes["gen_ai.tool.name"] == "word_count"
    assert tool_span.attributes["gen_ai.tool.call.id"] == call.call_id
    assert tool_span.attributes["drover.tool.state"] == "output-available"
    assert tool_span.attributes["drover.tool.outcome_unknown"] is False
    states = [e.attributes["drover.tool.state"] for e in tool_span.events]
    assert states == ["input-streaming", "input-available", "running", "output-available"]
    # The tool ran between the two model calls.
    assert models[0].end_ns <= tool_span.end_ns <= models[1].start_ns

    # Content, opted in, redacted as the journal is.
    arguments = json.loads(tool_span.attributes["gen_ai.tool.call.arguments"])
    assert arguments == {"text": "a b [REDACTED]"}
    assert tool_span.attributes["gen_ai.tool.call.result"] == "3"
    asked = json.loads(attrs["gen_ai.input.messages"])
    assert asked[0]["role"] == "user" and "[REDACTED]" in asked[0]["parts"][0]["content"]
    assert SECRET not in json.dumps([s.attributes for s in spans])
    said = json.loads(models[0].attributes["gen_ai.output.messages"])
    assert [p["type"] for p in said[0]["parts"]] == ["text", "tool_call"]

    # Where the turn's span is, kept for whoever continues it.
    stored = await stored_trace(tmp_path / "journal.db", result.turn_id)
    assert stored is not None
    version, trace_id, span_id, flags = stored.split("-")
    assert (version, trace_id, span_id) == ("00", turn.trace_id, turn.span_id)
    assert int(flags, 16) & 1  # sampled


async def test_content_stays_out_unless_asked(
    otel_env: Collector, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {"tool_calls": [{"name": "word_count", "input": {"text": "a b"}}]}, {"text": "Two."}
    )
    async with traced_agent(fake_llm, tmp_path, [word_count]) as (agent, _):
        await agent.run("count 'a b'")
    spans = otel_env.wait_for(lambda s: any(x.name == "invoke_agent drover" for x in s))
    keys = {k for s in spans for k in s.attributes}
    assert keys.isdisjoint(
        {
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        }
    )


async def test_a_model_call_failing_after_retries(
    otel_env: Collector, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    overloaded = {"http_error": {"status": 529, "type": "overloaded_error", "message": "busy"}}
    fake_llm.script(*[overloaded] * 5)
    async with traced_agent(fake_llm, tmp_path, [word_count]) as (agent, _):
        result = await agent.run("hello")
    assert result.status == "failed" and result.reason == "error"
    spans = otel_env.wait_for(lambda s: any(x.name == "invoke_agent drover" for x in s))

    turn = one(spans, "invoke_agent drover")
    assert turn.attributes["drover.turn.status"] == "failed"
    assert turn.attributes["drover.turn.reason"] == turn.attributes["error.type"] == "error"
    assert turn.error
    model = one(spans, "chat claude-test")
    assert model.parent_id == turn.span_id
    assert model.error and model.attributes["error.type"] == "error"
    retries = [e for e in model.events if e.name == "retry"]
    assert [e.attributes["drover.retry.attempt"] for e in retries] == [1, 2, 3, 4]
    assert all("busy" in e.attributes["error.message"] for e in retries)


async def test_a_cancelled_turn_ends_its_spans_interrupted(
    otel_env: Collector, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    entered = asyncio.Event()

    @tool
    async def deploy(ctx: ToolContext, target: str) -> str:
        """Deploy somewhere (side effects; never finishes here)."""
        entered.set()
        await asyncio.Event().wait()
        return "unreachable"

    fake_llm.script({"tool_calls": [{"name": "deploy", "input": {"target": "prod"}}]})
    async with traced_agent(fake_llm, tmp_path, [deploy]) as (agent, _):
        session = await agent.session()
        running = session.start("deploy it")
        await asyncio.wait_for(entered.wait(), 60)
        running.interrupt()
        await running.finished()
        assert running.end is not None and running.end.reason == "interrupted"
    spans = otel_env.wait_for(lambda s: any(x.name == "invoke_agent drover" for x in s))

    turn = one(spans, "invoke_agent drover")
    assert turn.attributes["drover.turn.status"] == "interrupted"
    assert not turn.error  # the user's stop is no failure
    model = one(spans, "chat claude-test")
    assert not model.error and model.end_ns <= turn.end_ns
    call = one(spans, "execute_tool deploy")
    assert call.attributes["drover.tool.state"] == "interrupted"
    assert call.attributes["drover.tool.outcome_unknown"] is True  # it had started
    assert call.end_ns <= turn.end_ns


async def test_a_continued_turn_links_to_the_turn_it_continues(
    otel_env: Collector, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    overloaded = {"http_error": {"status": 529, "type": "overloaded_error", "message": "busy"}}
    # The first turn ran a tool, then its model failed for good: the work is pending, and
    # the next turn finishes it.
    fake_llm.script(
        {"tool_calls": [{"name": "word_count", "input": {"text": "a b"}}]},
        *[overloaded] * 5,
        {"text": "Two words."},
    )
    async with traced_agent(fake_llm, tmp_path, [word_count]) as (agent, _):
        first = await agent.run("answer")
        assert first.status == "incomplete"
        second = await agent.resume(first.session_id)
        assert second.status == "completed"
    spans = otel_env.wait_for(lambda s: len([x for x in s if x.name.startswith("invoke")]) == 2)
    turns = {s.attributes["drover.turn.id"]: s for s in spans if s.name == "invoke_agent drover"}
    broken, resumed = turns[first.turn_id], turns[second.turn_id]
    assert broken.attributes["drover.turn.status"] == "incomplete"
    (link,) = resumed.links
    assert (link.trace_id, link.span_id) == (broken.trace_id, broken.span_id)
    assert link.attributes["drover.turn.id"] == first.turn_id
    assert not broken.links


async def test_workers_of_a_task_call_are_spans_under_the_call(
    otel_env: Collector, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    (tmp_path / "f.txt").write_text("hello there")
    tasks = [{"description": "read", "prompt": "read f.txt", "fresh": True}]
    fake_llm.script(
        {"tool_calls": [{"name": "task", "input": {"tasks": tasks}}]},
        {"tool_calls": [{"name": "read_file", "input": {"path": "f.txt"}}]},
        {"text": "worker: it says hello there"},
        {"text": "The worker read it."},
    )
    async with traced_agent(fake_llm, tmp_path, None) as (agent, _):
        result = await agent.run("use a worker")
    assert result.status == "completed"
    spans = otel_env.wait_for(lambda s: any(x.name == "invoke_agent drover" for x in s))
    turn = one(spans, "invoke_agent drover")
    task = one(spans, "execute_tool task")
    worker = one(spans, "invoke_agent drover worker")
    assert task.parent_id == turn.span_id
    assert worker.parent_id == task.span_id
    assert worker.attributes["drover.worker.index"] == 0
    assert worker.attributes["drover.turn.status"] == "completed"
    inner = [s.name for s in children(spans, worker)]
    assert sorted(inner) == ["chat claude-test", "chat claude-test", "execute_tool read_file"]
    assert len([s for s in children(spans, turn) if s.name.startswith("chat")]) == 2


async def test_the_callers_span_is_the_turns_parent(
    otel_env: Collector, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script({"text": "hi"})
    async with traced_agent(fake_llm, tmp_path, []) as (agent, telemetry):
        assert telemetry.tracer_provider is not None
        tracer = telemetry.tracer_provider.get_tracer("caller")
        with tracer.start_as_current_span("request"):
            await agent.run("hello")
    spans = otel_env.wait_for(lambda s: any(x.name == "request" for x in s))
    request = one(spans, "request")
    turn = one(spans, "invoke_agent drover")
    assert (turn.trace_id, turn.parent_id) == (request.trace_id, request.span_id)


async def test_without_telemetry_a_turn_has_no_observer(
    fake_llm: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import drover.runtime.runner as runner_module

    made: list[object] = []
    original = runner_module.TurnWatch
    monkeypatch.setattr(
        runner_module, "TurnWatch", lambda *a, **k: made.append(1) or original(*a, **k)
    )
    fake_llm.script({"text": "hi"})
    provider = AnthropicProvider("claude-test", api_key="k", base_url=fake_llm.anthropic_base_url)
    recorder = EventRecorder()
    try:
        async with Agent(provider, tools=[], store=":memory:", config=Config()) as agent:
            session = await agent.session()
            await session.run("hello", live=[recorder])
            assert agent.runner.telemetry is None
    finally:
        await provider.aclose()
    assert made == []
    assert not [e for e in recorder.events if e.type == "error"]
