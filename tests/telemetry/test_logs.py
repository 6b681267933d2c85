"""``--log-format json``: one JSON object a line, with the session, turn and trace ids of the
turn a record was logged in; the text format stays what it was."""

from __future__ import annotations

import io
import json
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from server.support import BOUND, DROVER, clean_env
from support.otlp import Collector

from drover import Agent, ToolContext, tool
from drover.config.settings import Config
from drover.providers.anthropic import AnthropicProvider
from drover.telemetry import Telemetry
from drover.telemetry.logs import JsonFormatter, configure_logging
from drover.testing.server import FakeLLMServer


@tool(read_only=True)
async def grumble(ctx: ToolContext, about: str) -> str:
    """Log a warning, then answer."""
    logging.getLogger("drover.tests.grumble").warning("grumbling about %s", about)
    return "done"


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = configure_logging("json", out)
    assert handler is not None
    try:
        yield out
    finally:
        logging.getLogger().removeHandler(handler)


async def test_a_record_inside_a_turn_carries_its_ids(
    json_log: io.StringIO, otel_env: Collector, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.script(
        {"tool_calls": [{"name": "grumble", "input": {"about": "the weather"}}]}, {"text": "ok"}
    )
    telemetry = Telemetry.from_env(traces=True)
    assert telemetry is not None
    provider = AnthropicProvider("claude-test", api_key="k", base_url=fake_llm.anthropic_base_url)
    try:
        async with Agent(
            provider, tools=[grumble], store=":memory:", config=Config(), telemetry=telemetry
        ) as agent:
            result = await agent.run("grumble")
        logging.getLogger("drover.tests").warning("after the turn")
    finally:
        await telemetry.aclose()
        await provider.aclose()
    inside, after = (json.loads(line) for line in json_log.getvalue().splitlines())
    assert inside["message"] == "grumbling about the weather"
    assert inside["level"] == "warning" and inside["logger"] == "drover.tests.grumble"
    assert (inside["session_id"], inside["turn_id"]) == (result.session_id, result.turn_id)
    spans = otel_env.wait_for(lambda s: any(x.name == "invoke_agent drover" for x in s))
    (turn,) = [s for s in spans if s.name == "invoke_agent drover"]
    assert (inside["trace_id"], inside["span_id"]) == (turn.trace_id, turn.span_id)
    assert inside["time"].endswith("+00:00")
    # Outside a turn: the same fields, empty.
    assert after["message"] == "after the turn"
    assert [after[k] for k in ("session_id", "turn_id", "trace_id", "span_id")] == [None] * 4


async def test_without_traces_a_record_still_names_its_turn(
    json_log: io.StringIO, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"tool_calls": [{"name": "grumble", "input": {"about": "x"}}]}, {"text": "ok"})
    provider = AnthropicProvider("claude-test", api_key="k", base_url=fake_llm.anthropic_base_url)
    try:
        async with Agent(provider, tools=[grumble], store=":memory:", config=Config()) as agent:
            result = await agent.run("grumble")
    finally:
        await provider.aclose()
    (inside,) = (json.loads(line) for line in json_log.getvalue().splitlines())
    assert (inside["session_id"], inside["turn_id"]) == (result.session_id, result.turn_id)
    assert inside["trace_id"] is None and inside["span_id"] is None


def test_an_exception_is_kept_in_its_record() -> None:
    try:
        raise ValueError("broken")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, None)
        import sys

        record.exc_info = sys.exc_info()
    shown = json.loads(JsonFormatter().format(record))
    assert shown["message"] == "failed" and "ValueError: broken" in shown["exception"]


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_the_command_line_writes_the_format_asked(
    fmt: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    # A server that cannot start is a warning of the agent's opening (outside any turn).
    mcp = tmp_path / "mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {"broken": {"command": "/nonexistent/server"}}}))
    fake_llm.script({"text": "hi"})
    run = subprocess.run(
        [
            *DROVER,
            "-p",
            "hello",
            "--model",
            "anthropic:test",
            "--base-url",
            fake_llm.base_url,
            "--db",
            str(tmp_path / "journal.db"),
            "--workdir",
            str(tmp_path),
            "--mcp-config",
            str(mcp),
            "--sandbox",
            "off",
            "--log-format",
            fmt,
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        timeout=BOUND,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "hi"
    lines = [line for line in run.stderr.splitlines() if "broken" in line]
    assert lines, run.stderr
    if fmt == "json":
        (record,) = (json.loads(line) for line in lines)
        assert record["level"] == "warning" and record["session_id"] is None
    else:
        assert not any(line.startswith("{") for line in lines)
