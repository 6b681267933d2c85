"""Property: cut a scripted response at every event boundary, on every protocol.

Hypothesis draws the shape of a response (text, tool calls, how the stream breaks); the test
then cuts it after 1, 2, 3… SSE events until the cut falls past the end. After every cut the
turn must end ``incomplete`` or ``error`` (never ``done``, never a hang), nothing the model
had not finished may have run, partial text must be a prefix of what was sent, and the next
turn must send a history the fake server — which enforces each API's 400 rules — accepts.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drover.channel import EventRecorder
from drover.events import Done, Error, Incomplete, ToolStart
from drover.loop import LoopSettings
from drover.messages import TextBlock
from drover.testing.server import FakeLLMServer

from .conftest import PROTOCOLS, make_provider, new_session

MAX_CUT = 80

shapes = st.fixed_dictionaries(
    {
        "text": st.sampled_from(["", "Reading the files.", "A somewhat longer preamble " * 3]),
        "calls": st.integers(min_value=0, max_value=2),
        "fault": st.sampled_from(["error_after", "drop_after"]),
        "protocol": st.sampled_from(PROTOCOLS),
    }
)


def _response(shape: dict[str, Any], cut: int) -> dict[str, Any]:
    response: dict[str, Any] = {shape["fault"]: cut}
    if shape["text"]:
        response["text"] = shape["text"]
    calls = [{"name": "read_file", "input": {"path": f"f{i}.txt"}} for i in range(shape["calls"])]
    if calls:
        response["tool_calls"] = calls
    if not calls and not shape["text"]:
        response["text"] = "x"
    return response


async def _cut_once(shape: dict[str, Any], cut: int, workdir: Path) -> bool:
    """One cut; returns False once the cut falls past the end of the stream."""
    with FakeLLMServer() as server:
        server.script(_response(shape, cut), {"text": "after tools"}, {"text": "resumed"})
        provider = make_provider(shape["protocol"], server)
        try:
            session = new_session(
                provider, workdir, settings=LoopSettings(stream_retries=0, stream_retry_delay=0)
            )
            sink = EventRecorder()
            outcome = await asyncio.wait_for(session.run("read the files", sink), timeout=30)
            if isinstance(outcome.event, Done):
                return False
            assert isinstance(outcome.event, Incomplete | Error)
            assert outcome.event.reason == "error"
            assert not any(isinstance(e, ToolStart) for e in sink.events), "a cut-off call ran"
            if isinstance(outcome.event, Error):
                assert [m.role for m in session.pending] == ["user"]
            for message in session.pending:
                for block in message.content:
                    if isinstance(block, TextBlock) and message.role == "assistant":
                        assert shape["text"].startswith(block.text)
            resumed = await asyncio.wait_for(session.run("continue", EventRecorder()), timeout=30)
            assert isinstance(resumed.event, Done)
        finally:
            await provider.aclose()
        assert server.violations == [], server.violations
        assert server.unexpected == [], server.unexpected
    return True


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

        async def sweep() -> int:
            for cut in range(1, MAX_CUT):
                if not await _cut_once(shape, cut, workdir):
                    return cut
            raise AssertionError(f"the stream was still being cut after {MAX_CUT} events")

        end = asyncio.run(sweep())
        assert end > 2
