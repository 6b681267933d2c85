"""Histories made by one protocol, continued by another: every request must be one the target
API accepts (the fake server enforces each API's history rules and fails the test otherwise)."""

from __future__ import annotations

import re
from itertools import product
from typing import Any

import pytest

from drover.core.messages import ToolResultBlock, tool_result_message, user_message
from drover.testing.server import FakeLLMServer

from .conftest import PROTOCOLS, collect, make_provider, request
from .histories import mixed_history

ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def sent_ids(protocol: str, body: dict[str, Any]) -> list[str]:
    if protocol == "anthropic":
        return [
            b["id"]
            for m in body["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_use"
        ]
    if protocol == "openai":
        return [c["id"] for m in body["messages"] for c in m.get("tool_calls", [])]
    # A chained request (previous_response_id) names the calls only in their outputs.
    kind = "function_call_output" if "previous_response_id" in body else "function_call"
    return [i["call_id"] for i in body["input"] if i.get("type") == kind]


def assert_ids_fit(protocol: str, ids: list[str]) -> None:
    assert ids, "the history sent no tool calls: nothing to check"
    assert len(set(ids)) == len(ids)
    if protocol == "anthropic":
        assert all(ANTHROPIC_ID.match(i) for i in ids), ids
    elif protocol == "openai":
        assert all(len(i) <= 40 for i in ids), ids
    else:
        assert all(0 < len(i) <= 64 for i in ids), ids


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_history_of_all_three_protocols_is_accepted(
    protocol: str, fake_llm: FakeLLMServer
) -> None:
    provider = make_provider(protocol, fake_llm)
    fake_llm.script({"text": "Summary: AAA, no b, CCC."})
    outcome = await collect(provider, request(*mixed_history()))
    await provider.aclose()
    assert outcome.message.text == "Summary: AAA, no b, CCC."
    assert_ids_fit(protocol, sent_ids(protocol, fake_llm.requests[0].body))


@pytest.mark.parametrize(("source", "target"), list(product(PROTOCOLS, PROTOCOLS)))
async def test_switching_provider_mid_task(
    source: str, target: str, fake_llm: FakeLLMServer
) -> None:
    """Turn one with thinking and parallel calls on ``source``; the results go to ``target``."""
    first_provider = make_provider(source, fake_llm)
    second_provider = make_provider(target, fake_llm)
    calls = [{"name": "read_file", "input": {"path": p}} for p in ("a", "b")]
    quirks = ["no_ids"] if source == "openai" else []
    fake_llm.script(
        {"thinking": "two files", "text": "Reading.", "tool_calls": calls, "quirks": quirks},
        {"text": "Both read."},
        {"text": "Again."},
    )
    try:
        first = await collect(first_provider, request(user_message("read a and b")))
        results = tool_result_message(
            [
                ToolResultBlock(tool_use_id=u.id, content=f"content {i}", is_error=i == 1)
                for i, u in enumerate(first.message.tool_uses)
            ]
        )
        history = [user_message("read a and b"), first.message, results]
        second = await collect(second_provider, request(*history))
        # and back again, with the target's answer in the history
        third = await collect(
            first_provider, request(*history, second.message, user_message("again"))
        )
    finally:
        await first_provider.aclose()
        await second_provider.aclose()
    assert second.message.text == "Both read." and third.message.text == "Again."
    assert_ids_fit(target, sent_ids(target, fake_llm.requests[1].body))
