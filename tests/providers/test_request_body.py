"""The OpenAI providers send the history past the SDK's request transform, and the body is the
one the SDK would have built had the history gone through it: the same keys, in the same
order, with the same values. The Anthropic provider posts the body it encoded itself, past the
SDK's copy of it: the very request ``messages.create`` sends, byte for byte, headers included.
A Responses request that cannot chain does not digest its input before it is sent."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import pytest
from openai._utils import async_maybe_transform

from drover.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, user_message
from drover.providers.anthropic import AnthropicProvider
from drover.providers.convert_anthropic import to_anthropic_messages, to_anthropic_tools
from drover.providers.convert_openai_chat import to_chat_messages
from drover.providers.convert_openai_responses import plan_input
from drover.testing.server import FakeLLMServer

from .conftest import READ_FILE, collect, make_provider, request
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


class Capture:
    """A transport that keeps each request and answers an empty Anthropic stream."""

    def __init__(self) -> None:
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        stop = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stop)


def captured_client(capture: Capture) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key="k",
        base_url="http://anthropic.test",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(capture)),
    )


def comparable(request: httpx2.Request) -> tuple[str, str, list[tuple[str, str]], bytes]:
    headers = [
        (k, v) for k, v in request.headers.items() if k.lower() != "x-stainless-read-timeout"
    ]
    return request.method, str(request.url), headers, request.content


@pytest.mark.parametrize("thinking_budget", [None, 1024])
@pytest.mark.parametrize("system", ["", SYSTEM])
async def test_anthropic_posts_the_request_create_would_send(
    thinking_budget: int | None, system: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from anthropic import _base_client

    prepared: list[Any] = []
    real_prepare = _base_client.async_prepare_request_data

    async def spy(data: Any, **kwargs: Any) -> Any:
        prepared.append(data)
        return await real_prepare(data, **kwargs)

    sent, direct = Capture(), Capture()
    provider = AnthropicProvider("claude-x", api_key="k", thinking_budget=thinking_budget)
    await provider.aclose()
    provider._client = captured_client(sent)
    monkeypatch.setattr(_base_client, "async_prepare_request_data", spy)
    await collect(provider, request(*history(), system=system))
    await provider.aclose()
    assert prepared == [None]  # the SDK never copied the body: it got bytes
    monkeypatch.undo()

    client = captured_client(direct)
    max_tokens = 8192
    thinking: Any = anthropic.omit
    if thinking_budget:
        thinking = {"type": "enabled", "budget_tokens": thinking_budget}
        max_tokens += thinking_budget
    stream = await client.messages.create(
        model="claude-x",
        max_tokens=max_tokens,
        messages=to_anthropic_messages(history()),
        system=system or anthropic.omit,
        tools=to_anthropic_tools([READ_FILE]),
        thinking=thinking,
        stream=True,
    )
    await stream.close()
    await client.close()
    [mine], [theirs] = sent.requests, direct.requests
    assert "naïve".encode() in mine.content and '"call_ü"'.encode() not in mine.content
    assert comparable(mine) == comparable(theirs)


async def test_anthropic_leaves_a_body_json_cannot_encode_to_create() -> None:
    from types import MappingProxyType

    from drover.streaming import ToolSpec

    odd = ToolSpec(
        name="read_file",
        description="Read a file.",
        input_schema={"type": "object", "properties": MappingProxyType({"path": {}})},
    )
    sent = Capture()
    provider = AnthropicProvider("claude-x", api_key="k")
    await provider.aclose()
    provider._client = captured_client(sent)
    await collect(provider, request(user_message("hi"), tools=(odd,)))
    await provider.aclose()
    [mine] = sent.requests
    assert b'"properties":{"path":{}}' in mine.content  # the SDK made a dict of it


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
