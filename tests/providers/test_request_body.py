"""Each provider posts the body it encoded itself (``wire_json.encode_body``), past the SDK's
walk of the parameters (OpenAI's transform, Anthropic's copy) and its slow ``json`` encoding:
the very request the SDK's ``create`` sends given the same parameters, byte for byte, headers
included. A body the SDK's encoding refuses goes through ``create``. A Responses request that
cannot chain does not digest its input before it is sent."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, TypeVar

import anthropic
import httpx2
import openai
import pytest

from drover.core.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, user_message
from drover.core.model_stream import ModelRequest, OutputSpec
from drover.providers.anthropic import AnthropicProvider, anthropic_output_format
from drover.providers.convert_anthropic import to_anthropic_messages, to_anthropic_tools
from drover.providers.convert_openai_chat import to_chat_messages, to_chat_tools
from drover.providers.convert_openai_responses import plan_input, to_responses_tools
from drover.providers.openai_chat import OpenAIChatProvider
from drover.providers.openai_responses import OpenAIResponsesProvider
from drover.providers.output_format import chat_response_format, responses_text_format

from .conftest import READ_FILE, collect, request
from .histories import mixed_history

Client = TypeVar("Client", anthropic.AsyncAnthropic, openai.AsyncOpenAI)

SYSTEM = "Be brief, ünd exact."
#: Structured output asked for (a schema with a nested object, a nullable and a default).
OUTPUT = OutputSpec(
    name="Answer",
    schema={
        "type": "object",
        "properties": {
            "city": {"type": "object", "properties": {"name": {"type": "string"}}},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": ["city"],
    },
)


def with_output(req: ModelRequest, output: bool) -> ModelRequest:
    return replace(req, output=OUTPUT) if output else req


def history() -> list[Message]:
    """Every provider's detail, ids the APIs refuse, non-ASCII text and nested arguments."""
    use = ToolUseBlock(id="call_ü", name="read_file", input={"path": "é/ß", "opts": [1, None]})
    return [
        *mixed_history(),
        Message(role="assistant", content=(TextBlock(text="naïve \u2028 ✓"), use)),
        Message(role="user", content=(ToolResultBlock(tool_use_id="call_ü", content="日本"),)),
        user_message("and then?"),
    ]


class Capture:
    """A transport that keeps each request and answers an empty Anthropic stream."""

    def __init__(self) -> None:
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        stop = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stop)


def sdk_client(sdk: type[Client], base_url: str, capture: Capture) -> Client:
    return sdk(
        api_key="k",
        base_url=base_url,
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(capture)),
    )


def captured_client(capture: Capture) -> anthropic.AsyncAnthropic:
    return sdk_client(anthropic.AsyncAnthropic, "http://anthropic.test", capture)


def openai_client(capture: Capture) -> openai.AsyncOpenAI:
    return sdk_client(openai.AsyncOpenAI, "http://openai.test/v1", capture)


def comparable(request: httpx2.Request) -> tuple[str, str, list[tuple[str, str]], bytes]:
    headers = [
        (k, v) for k, v in request.headers.items() if k.lower() != "x-stainless-read-timeout"
    ]
    return request.method, str(request.url), headers, request.content


async def sdk_create(
    protocol: str, client: openai.AsyncOpenAI, system: str, output: bool = False
) -> Any:
    """The request drover makes, through the SDK's ``create`` with every parameter given to
    it (the history walked by its transform, the body encoded by its ``json``)."""
    if protocol == "openai":
        return await client.chat.completions.create(
            model="gpt-x",
            messages=to_chat_messages(system, history()),  # type: ignore[arg-type]
            tools=to_chat_tools([READ_FILE]),
            response_format=chat_response_format(OUTPUT) if output else openai.omit,
            stream=True,
            stream_options={"include_usage": True},
            max_tokens=8192,
        )
    return await client.responses.create(
        model="gpt-x",
        input=plan_input(history(), stored=False).items,  # type: ignore[arg-type]
        instructions=system or openai.omit,
        tools=to_responses_tools([READ_FILE]),
        store=False,
        include=["reasoning.encrypted_content"],
        max_output_tokens=8192,
        text={"format": responses_text_format(OUTPUT)} if output else openai.omit,
        stream=True,
    )


@pytest.mark.parametrize("output", [False, True])
@pytest.mark.parametrize("system", ["", SYSTEM])
@pytest.mark.parametrize("protocol", ["openai", "openai-responses"])
async def test_openai_posts_the_request_create_would_send(
    protocol: str, system: str, output: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Headers, URL and body bytes: the body is plain strings, integers, lists and objects,
    which orjson writes exactly as ``json`` does (only a float may be spelled differently)."""
    from openai import _base_client

    encoded: list[Any] = []
    real_dumps = _base_client.openapi_dumps

    def spy(data: Any) -> bytes:
        encoded.append(data)
        return real_dumps(data)

    sent, direct = Capture(), Capture()
    provider: Any
    if protocol == "openai":
        provider = OpenAIChatProvider("gpt-x", api_key="k", base_url="http://openai.test/v1")
    else:
        provider = OpenAIResponsesProvider(
            "gpt-x", api_key="k", base_url="http://openai.test/v1", store=False
        )
    await provider.aclose()
    provider._client = openai_client(sent)
    monkeypatch.setattr(_base_client, "openapi_dumps", spy)
    stream, _events = await provider._open(with_output(request(*history(), system=system), output))
    await stream.close()
    await provider.aclose()
    assert encoded == []  # the SDK encoded nothing: it got bytes
    monkeypatch.undo()

    client = openai_client(direct)
    await (await sdk_create(protocol, client, system, output)).close()
    await client.close()
    [mine], [theirs] = sent.requests, direct.requests
    assert "naïve".encode() in mine.content and len(json.loads(mine.content)) >= 6
    assert comparable(mine) == comparable(theirs)


@pytest.mark.parametrize("output", [False, True])
@pytest.mark.parametrize("thinking_budget", [None, 1024])
@pytest.mark.parametrize("system", ["", SYSTEM])
async def test_anthropic_posts_the_request_create_would_send(
    thinking_budget: int | None, system: str, output: bool, monkeypatch: pytest.MonkeyPatch
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
    await collect(provider, with_output(request(*history(), system=system), output))
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
        output_config={"format": anthropic_output_format(OUTPUT)} if output else anthropic.omit,
        stream=True,
    )
    await stream.close()
    await client.close()
    [mine], [theirs] = sent.requests, direct.requests
    assert "naïve".encode() in mine.content and '"call_ü"'.encode() not in mine.content
    assert comparable(mine) == comparable(theirs)


async def test_anthropic_leaves_a_body_json_cannot_encode_to_create() -> None:
    from types import MappingProxyType

    from drover.core.model_stream import ToolSpec

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


@pytest.mark.parametrize("protocol", ["openai", "openai-responses"])
async def test_openai_leaves_a_body_json_cannot_encode_to_create(protocol: str) -> None:
    from datetime import datetime

    from drover.core.model_stream import ToolSpec

    odd = ToolSpec(  # a datetime: the SDK's own encoder writes it in ISO form, json refuses it
        name="read_file",
        description="Read a file.",
        input_schema={"type": "object", "default": datetime(2026, 1, 2)},
    )
    sent = Capture()
    provider: Any = (OpenAIChatProvider if protocol == "openai" else OpenAIResponsesProvider)(
        "gpt-x", api_key="k", base_url="http://openai.test/v1"
    )
    await provider.aclose()
    provider._client = openai_client(sent)
    stream, _events = await provider._open(request(*history(), tools=(odd,)))
    await stream.close()
    await provider.aclose()
    [mine] = sent.requests
    assert b'"default":"2026-01-02T00:00:00"' in mine.content
    assert "naïve".encode() in mine.content  # with the history, past its transform


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
