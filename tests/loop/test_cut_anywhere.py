"""Property: cut a scripted response at every event boundary, on every protocol.

Hypothesis draws the shape of a response (text, tool calls, how the stream breaks); the test
then cuts it after 1, 2, 3… SSE frames, up to the last boundary inside the stream. After every
cut the turn must end ``incomplete`` or ``error`` (never ``done``, never a hang), nothing the model
had not finished may have run, partial text must be a prefix of what was sent, and the next
turn must send a history the fake server — which enforces each API's 400 rules — accepts.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import httpx2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drover.core.events import Done, Error, Incomplete, ToolStart
from drover.core.messages import TextBlock
from drover.core.sinks import EventRecorder
from drover.testing.server import FakeLLMServer
from drover.turn.loop import LoopSettings

from .conftest import PROTOCOLS, make_provider, new_session

PROBES: dict[str, tuple[str, dict[str, Any]]] = {
    "anthropic": (
        "/v1/messages",
        {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "openai": (
        "/v1/chat/completions",
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "stream_options": {"include_usage": True},
        },
    ),
    "openai-responses": ("/v1/responses", {"model": "m", "input": "hi"}),
}

shapes = st.fixed_dictionaries(
    {
        "text": st.sampled_from(["", "Reading the files.", "A somewhat longer preamble " * 3]),
        "calls": st.integers(min_value=0, max_value=2),
        "fault": st.sampled_from(["error_after", "drop_after"]),
        "protocol": st.sampled_from(PROTOCOLS),
    }
)


def _frame_count(shape: dict[str, Any]) -> int:
    """How many SSE frames the fake server sends for this response when nothing breaks."""
    response = _response(shape, None)
    path, body = PROBES[shape["protocol"]]
    with FakeLLMServer() as server:
        server.script(response)
        reply = httpx2.post(f"{server.base_url}{path}", json={**body, "stream": True}, timeout=30)
        reply.raise_for_status()
        return reply.content.count(b"\n\n")


def _response(shape: dict[str, Any], cut: int | None) -> dict[str, Any]:
    response: dict[str, Any] = {} if cut is None else {shape["fault"]: cut}
    if shape["text"]:
        response["text"] = shape["text"]
    calls = [{"name": "read_file", "input": {"path": f"f{i}.txt"}} for i in range(shape["calls"])]
    if calls:
        response["tool_calls"] = calls
    if not calls and not shape["text"]:
        response["text"] = "x"
    return response


async def _cut_once(shape: dict[str, Any], cut: int, workdir: Path) -> None:
    """Cut the response after ``cut`` frames and check the invariants."""
    with FakeLLMServer() as server:
        server.script(_response(shape, cut), {"text": "after tools"}, {"text": "resumed"})
        provider = make_provider(shape["protocol"], server)
        try:
            session = new_session(
                provider, workdir, settings=LoopSettings(stream_retries=0, stream_retry_delay=0)
            )
            sink = EventRecorder()
            outcome = await asyncio.wait_for(session.run("read the files", sink), timeout=30)
            assert isinstance(outcome.event, Incomplete | Error)
            assert outcome.event.reason == "error"
            assert not any(isinstance(e, ToolStart) for e in sink.events), "a cut-off call ran"
            if isinstance(outcome.event, Error):
                assert [m.role for m in session.pending] == ["user"]
            sent_text = _response(shape, cut).get("text", "")
            for message in session.pending:
                for block in message.content:
                    if isinstance(block, TextBlock) and message.role == "assistant":
                        assert sent_text.startswith(block.text)
            resumed = await asyncio.wait_for(session.run("continue", EventRecorder()), timeout=30)
            assert isinstance(resumed.event, Done)
        finally:
            await provider.aclose()
        assert server.violations == [], server.violations
        assert server.unexpected == [], server.unexpected


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(shape=shapes)
def test_cut_at_every_event_boundary(shape: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for i in range(shape["calls"]):
            (workdir / f"f{i}.txt").write_text(f"file {i}")

        total = _frame_count(shape)
        assert total > 2

        async def sweep() -> None:
            for cut in range(1, total):  # every boundary strictly inside the stream
                await _cut_once(shape, cut, workdir)

        asyncio.run(sweep())
