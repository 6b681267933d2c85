"""The OpenAI providers send the history past the SDK's request transform, and the body is the
one the SDK would have built had the history gone through it: the same keys, in the same
order, with the same values. A Responses request that cannot chain does not digest its input
before it is sent."""

from __future__ import annotations

from typing import Any

import pytest
from openai._utils import async_maybe_transform

from drover.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, user_message
from drover.providers.convert_openai_chat import to_chat_messages
from drover.providers.convert_openai_responses import plan_input
from drover.testing.server import FakeLLMServer

from .conftest import collect, make_provider, request
from .histories import mixed_history

# (protocol, module whose ``async_maybe_transform`` the create call uses, history parameter)
CASES = [
    ("openai", "openai.resources.chat.completions.completions", "messages"),
    ("openai-responses", "openai.resources.responses.responses", "input"),
]


SYSTEM = "Be brief, ünd exact."


def history() -> list[Message]:
    """Every provider's detail, ids the APIs refuse, non-ASCII text and nested arguments."""
    use = ToolUseBlock(id="call_ü", name="read_file", input={"path": "é/ß", "opts": [1, None]})
    return [
        *mixed_history(),
        Message(role="assistant", content=(TextBlock(text="naïve \u2028 ✓"), use)),
        Message(role="user", content=(ToolResultBlock(tool_use_id="call_ü", content="日本"),)),
        user_message("and then?"),
    ]


def wire_form(protocol: str, messages: list[Message]) -> list[Any]:
    if protocol == "openai":
        return list(to_chat_messages(SYSTEM, messages))
    return plan_input(messages, stored=False).items


@pytest.mark.parametrize(("protocol", "module", "key"), CASES)
async def test_history_skips_the_transform_and_the_body_is_unchanged(
    protocol: str, module: str, key: str, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[dict[str, Any], Any]] = []

    async def spy(data: dict[str, Any], expected_type: Any) -> Any:
        seen.append((data, expected_type))
        return await async_maybe_transform(data, expected_type)

    monkeypatch.setattr(f"{module}.async_maybe_transform", spy)
    provider = make_provider(protocol, fake_llm, store=False)
    fake_llm.script({"text": "ok"})
    try:
        await collect(provider, request(*history(), system=SYSTEM))
    finally:
        await provider.aclose()

    [(params, params_type)] = seen
    assert params[key] == []  # the SDK never walked the history
    body = fake_llm.requests[0].body
    assert len(body[key]) > 8
    # What the SDK makes of drover's wire form when it does walk it: the very body sent.
    wire = wire_form(protocol, history())
    expected = await async_maybe_transform({**params, key: wire}, params_type)
    assert body == expected
    assert list(body) == list(expected)


def test_a_plan_that_cannot_chain_leaves_its_digest_until_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from drover.providers import convert_openai_responses as convert

    digests: list[int] = []
    real = convert.items_digest

    def counted(items: Any) -> str:
        digests.append(len(items))
        return real(items)

    monkeypatch.setattr(convert, "items_digest", counted)
    plan = plan_input(history(), stored=True)  # no response of this API to continue
    assert digests == []  # nothing encoded for it before the request goes out
    assert plan.digest == real(convert.to_responses_input(history(), stored=True))
    assert plan.digest == plan.digest and digests == [len(plan.items)]  # once
