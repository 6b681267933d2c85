"""Changing provider after a failed turn converts the pending work instead of dropping it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from drover.core.events import Done, Incomplete
from drover.testing.server import FakeLLMServer

from .conftest import PROTOCOLS, Answering, make_provider, new_session

PAIRS = list(itertools.permutations(PROTOCOLS, 2))


@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a}-to-{b}" for a, b in PAIRS])
async def test_pending_work_survives_a_provider_switch(
    first: str, second: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("alpha-content")
    fake_llm.script(
        {
            "thinking": "I should read the file.",
            "text": "Reading it.",
            "tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}],
        },
        {"http_error": {"status": 400, "message": "broken"}},
        {"text": "The file holds alpha-content."},
    )
    provider = make_provider(first, fake_llm)
    session = new_session(provider, tmp_path)
    outcome = await session.run("read a.txt", Answering())
    assert isinstance(outcome.event, Incomplete)
    await provider.aclose()

    other = make_provider(second, fake_llm)
    session.switch_provider(other)
    try:
        resumed = await session.run("go on", Answering())
    finally:
        await other.aclose()
    assert isinstance(resumed.event, Done)
    body = json.dumps(fake_llm.requests[-1].body)
    # The tool call and its output reached the new API (the fake server validated the pairing).
    assert "alpha-content" in body and "read_file" in body
    assert body.index("read a.txt") < body.index("alpha-content") < body.index("go on")
