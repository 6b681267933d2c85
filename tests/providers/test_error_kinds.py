"""Errors a caller must tell apart, through the real SDKs against the fake server: a prompt
over the context window (never retried, its own class on every protocol), and a wrong base
URL (the URL it tried and what to check, instead of a bare "HTTP 404")."""

from __future__ import annotations

import pytest

from drover.errors import ContextOverflowError, ProviderHTTPError, StreamError
from drover.providers.base import Provider
from drover.testing.server import FakeLLMServer

from .conftest import drain, make_provider, request

V1_HINT = "is the base URL right? OpenAI-compatible servers usually end in /v1"


async def test_a_prompt_over_the_context_window_is_a_context_overflow(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"context_overflow": {"tokens": 210_000, "limit": 200_000}}, {"text": "x"})
    outcome = await drain(provider, request())
    error = outcome.error
    assert isinstance(error, ContextOverflowError) and not error.retryable
    assert error.status == 400 and outcome.retries == [] and outcome.events == []
    expected = {
        "anthropic": "HTTP 400: prompt is too long: 210000 tokens > 200000 maximum",
        "openai": "HTTP 400: This model's maximum context length is 200000 tokens. However, "
        "your messages resulted in 210000 tokens. Please reduce the length of the messages.",
        "openai-responses": "HTTP 400: Your input exceeds the context window of this model. "
        "Please adjust your input and try again.",
    }
    assert str(error) == expected[provider.name]
    assert fake_llm.remaining == 1  # not retried


@pytest.mark.parametrize("event", ["failed", "error"])
async def test_a_responses_stream_that_fails_for_its_length_is_a_context_overflow(
    fake_llm: FakeLLMServer, event: str
) -> None:
    provider = make_provider("openai-responses", fake_llm)
    fake_llm.script({"context_overflow": {"mid_stream": event}}, {"text": "x"})
    try:
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    error = outcome.error
    assert isinstance(error, ContextOverflowError) and not error.retryable
    assert str(error).startswith("Your input exceeds the context window of this model.")
    assert error.error_type == "context_length_exceeded"
    assert outcome.retries == [] and fake_llm.remaining == 1


async def test_other_bad_requests_are_not_context_overflows(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"http_error": {"status": 400, "message": "max_tokens: too large"}})
    outcome = await drain(provider, request())
    assert isinstance(outcome.error, ProviderHTTPError)
    assert not isinstance(outcome.error, ContextOverflowError)


@pytest.mark.parametrize("protocol", ["openai", "openai-responses"])
async def test_a_base_url_without_v1_names_the_url_and_the_fix(
    protocol: str, fake_llm: FakeLLMServer
) -> None:
    provider = make_provider(protocol, fake_llm, base_url=fake_llm.base_url)
    try:
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    error = outcome.error
    assert isinstance(error, ProviderHTTPError) and error.status == 404 and not error.retryable
    path = "/chat/completions" if protocol == "openai" else "/responses"
    assert str(error) == f"HTTP 404: Not Found (POST {fake_llm.base_url}{path} — {V1_HINT})"
    assert outcome.retries == []


async def test_an_anthropic_base_url_with_v1_names_the_url(fake_llm: FakeLLMServer) -> None:
    provider = make_provider("anthropic", fake_llm, base_url=f"{fake_llm.base_url}/v1")
    try:
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    assert isinstance(outcome.error, ProviderHTTPError) and outcome.error.status == 404
    message = str(outcome.error)
    assert f"POST {fake_llm.base_url}/v1/v1/messages" in message
    assert "is the base URL right?" in message


async def test_an_error_page_from_a_proxy_names_the_url(
    protocol: str, fake_llm: FakeLLMServer
) -> None:
    provider = make_provider(protocol, fake_llm, max_retries=0)
    page = "<html><body>\n<h1>502 Bad Gateway</h1>\n</body></html>\n"
    fake_llm.script({"raw_text": page, "status": 502, "content_type": "text/html"})
    try:
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    error = outcome.error
    assert isinstance(error, ProviderHTTPError) and error.status == 502 and error.retryable
    assert "<h1>502 Bad Gateway</h1>" in str(error)
    assert "POST http://" in str(error) and "is the base URL right?" in str(error)


async def test_the_apis_own_404_names_the_url_without_the_hint(
    provider: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"http_error": {"status": 404, "message": "model: gpt-nope"}})
    outcome = await drain(provider, request())
    assert isinstance(outcome.error, ProviderHTTPError) and outcome.error.status == 404
    message = str(outcome.error)
    assert message.startswith("HTTP 404: model: gpt-nope (POST http://")
    assert "is the base URL right?" not in message


@pytest.mark.parametrize("error_frame", ["event: error\n\n", 'event: error\ndata: {"x": 1}\n\n'])
async def test_an_anthropic_error_event_fails_the_stream_as_the_sdk_raises_it(
    fake_llm: FakeLLMServer, error_frame: str
) -> None:
    """drover reads Anthropic's stream itself; an ``error`` event — with no data line too,
    which the SDK raises as "Error code: 200" — still fails the attempt, never a quiet end."""
    start = (
        "event: message_start\n"
        'data: {"type":"message_start","message":{"id":"msg_1","type":"message",'
        '"role":"assistant","model":"m","content":[],"stop_reason":null,'
        '"usage":{"input_tokens":1,"output_tokens":0}}}\n\n'
    )
    # A complete answer follows: an error event dropped would end the stream normally.
    rest = (
        "event: content_block_start\n"
        'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'
        "\n\nevent: content_block_delta\n"
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}'
        "\n\nevent: content_block_stop\n"
        'data: {"type":"content_block_stop","index":0}\n\n'
        "event: message_delta\n"
        'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
        '"usage":{"output_tokens":1}}\n\n'
        'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    fake_llm.script({"raw_text": start + error_frame + rest})
    provider = make_provider("anthropic", fake_llm, max_retries=0)
    try:
        outcome = await drain(provider, request())
    finally:
        await provider.aclose()
    assert isinstance(outcome.error, StreamError), outcome.error
