"""A server that goes silent: each wait for data is bounded by the stall timeout, on every
protocol, through the real SDKs — mid-stream, before the first event, and before the status
line — and a shared retry budget bounds the whole call.

Times are measured only as failure bounds: a stalled attempt ends after the (short) stall
timeout, so a call that would hang for the SDK's ten-minute read timeout fails the bound.

Each test runs on the SDKs' httpx client and on their aiohttp client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from drover.config.settings import Config
from drover.core.model_stream import RetryBudget
from drover.errors import ProviderConnectionError, StreamError
from drover.providers.base import Provider
from drover.providers.factory import create_provider
from drover.testing.server import FakeLLMServer

from .conftest import ON_BOTH_CLIENTS, PROTOCOLS, Outcome, drain, make_provider, request

STALL = 0.3
#: Generous bound for one call on a slow, shared machine; a real stall is 600 s per attempt.
BOUND = 20.0


pytestmark = ON_BOTH_CLIENTS


API_NAMES = {
    "anthropic": "the Anthropic API",
    "openai": "the OpenAI Chat Completions API",
    "openai-responses": "the OpenAI Responses API",
}
LONG = "The quick brown fox jumps over the lazy dog. " * 3


async def timed_drain(
    provider: Provider, budget: RetryBudget | None = None
) -> tuple[Outcome, float]:
    began = time.monotonic()
    outcome = await asyncio.wait_for(drain(provider, request(budget=budget)), timeout=BOUND * 2)
    return outcome, time.monotonic() - began


@pytest.fixture
async def stalling(
    protocol: str, fake_llm: FakeLLMServer, http_client: str
) -> AsyncIterator[Provider]:
    provider = make_provider(
        protocol, fake_llm, max_retries=1, stall_timeout=STALL, http_client=http_client
    )
    yield provider
    await provider.aclose()


async def test_a_stall_mid_stream_is_a_retryable_stream_error(
    protocol: str, stalling: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"text": LONG, "stall_after": 6})
    outcome, elapsed = await timed_drain(stalling)
    assert isinstance(outcome.error, StreamError) and outcome.error.retryable
    assert str(outcome.error) == f"no data from {API_NAMES[protocol]} for 0.3 s: the stream stalled"
    assert outcome.retries == []  # started: the caller decides, from the partial answer
    assert outcome.acc.has_content
    assert STALL <= elapsed < BOUND


async def test_a_stall_before_the_first_event_is_retried(
    protocol: str, stalling: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"text": "lost", "stall_after": 0}, {"text": "ok"})
    outcome, elapsed = await timed_drain(stalling)
    assert outcome.error is None and outcome.message.text == "ok"
    (notice,) = outcome.retries
    assert notice.error == f"no data from {API_NAMES[protocol]} for 0.3 s: the stream stalled"
    assert elapsed < BOUND


async def test_a_server_that_never_answers_is_retried(
    protocol: str, stalling: Provider, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script({"hang": True}, {"text": "ok"})
    outcome, elapsed = await timed_drain(stalling)
    assert outcome.error is None and outcome.message.text == "ok"
    assert len(outcome.retries) == 1 and "the stream stalled" in outcome.retries[0].error
    assert len(fake_llm.requests) == 2
    assert elapsed < BOUND


async def test_the_retry_budget_bounds_a_call_that_keeps_stalling(
    protocol: str, fake_llm: FakeLLMServer, http_client: str
) -> None:
    provider = make_provider(
        protocol, fake_llm, max_retries=50, stall_timeout=STALL, http_client=http_client
    )
    budget = RetryBudget(limit=2)
    fake_llm.script({"hang": True}, {"text": "x", "stall_after": 0}, {"hang": True})
    try:
        outcome, elapsed = await timed_drain(provider, budget)
    finally:
        await provider.aclose()
    assert isinstance(outcome.error, ProviderConnectionError) and outcome.error.retryable
    assert str(outcome.error).endswith("the stream stalled (gave up after 3 attempts)")
    assert [r.attempt for r in outcome.retries] == [1, 2]
    assert budget.used == 2 and len(fake_llm.requests) == 3
    assert 3 * STALL <= elapsed < BOUND


@pytest.mark.parametrize("spec_protocol", PROTOCOLS)
async def test_the_configured_stall_timeout_reaches_the_provider(
    spec_protocol: str, fake_llm: FakeLLMServer, http_client: str
) -> None:
    base = fake_llm.anthropic_base_url if spec_protocol == "anthropic" else fake_llm.openai_base_url
    config = Config(stall_timeout=0.25, base_urls={spec_protocol: base}, http_client=http_client)
    provider = create_provider(f"{spec_protocol}:m", config)
    fake_llm.script({"text": LONG, "stall_after": 3})
    try:
        outcome, elapsed = await timed_drain(provider)
    finally:
        await provider.aclose()
    assert isinstance(outcome.error, StreamError)
    assert "for 0.25 s: the stream stalled" in str(outcome.error)
    assert elapsed < BOUND


def _anthropic_frames_with_pings(pings: int) -> str:
    def frame(event: str, data: str) -> str:
        return f"event: {event}\ndata: {data}\n\n"

    start = (
        '{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant",'
        '"model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,'
        '"usage":{"input_tokens":5,"output_tokens":1}}}'
    )
    return "".join(
        [
            frame("message_start", start),
            *[frame("ping", '{"type": "ping"}')] * pings,
            frame(
                "content_block_start",
                '{"type":"content_block_start","index":0,'
                '"content_block":{"type":"text","text":""}}',
            ),
            frame(
                "content_block_delta",
                '{"type":"content_block_delta","index":0,'
                '"delta":{"type":"text_delta","text":"still here"}}',
            ),
            frame("content_block_stop", '{"type":"content_block_stop","index":0}'),
            frame(
                "message_delta",
                '{"type":"message_delta","delta":{"stop_reason":"end_turn",'
                '"stop_sequence":null},"usage":{"output_tokens":3}}',
            ),
            frame("message_stop", '{"type":"message_stop"}'),
        ]
    )


async def test_keep_alive_pings_are_not_a_stall(fake_llm: FakeLLMServer, http_client: str) -> None:
    # 40 pings 0.04 s apart: no event reaches the provider for 1.6 s, but bytes keep coming.
    provider = make_provider(
        "anthropic", fake_llm, max_retries=0, stall_timeout=1.0, http_client=http_client
    )
    fake_llm.script({"raw_text": _anthropic_frames_with_pings(40), "delay": 0.04})
    try:
        outcome, elapsed = await timed_drain(provider)
    finally:
        await provider.aclose()
    assert outcome.error is None and outcome.message.text == "still here"
    assert 1.0 < elapsed < BOUND
