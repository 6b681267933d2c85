"""Shared pieces for provider tests: one provider per protocol aimed at the fake server,
helpers that drain a stream into its events (and the error that ended it, if any), and a
running forward proxy."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest

from drover.config.settings import HTTP_CLIENTS
from drover.core.accumulate import Accumulator
from drover.core.messages import Message, user_message
from drover.core.model_stream import ModelRequest, RetryBudget, RetryNotice, StreamEvent, ToolSpec
from drover.providers.anthropic import AnthropicProvider
from drover.providers.base import Provider
from drover.providers.openai_chat import OpenAIChatProvider
from drover.providers.openai_responses import OpenAIResponsesProvider
from drover.testing.server import FakeLLMServer

from .proxy import ForwardProxy

PROTOCOLS = ["anthropic", "openai", "openai-responses"]

READ_FILE = ToolSpec(
    name="read_file",
    description="Read a file.",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
)


def make_provider(
    protocol: str,
    server: FakeLLMServer,
    *,
    max_retries: int = 4,
    store: bool | None = None,
    stall_timeout: float = 30.0,
    base_url: str | None = None,
    http_client: str = "httpx",
) -> Provider:
    """A provider with a tiny backoff, so retry tests take no time; ``base_url`` replaces the
    fake server's own; ``http_client`` is the SDK's HTTP client (``httpx`` or ``aiohttp``)."""
    if protocol == "anthropic":
        return AnthropicProvider(
            "claude-test",
            api_key="test-key",
            base_url=base_url or server.anthropic_base_url,
            max_retries=max_retries,
            backoff_base=0.001,
            backoff_max=0.002,
            stall_timeout=stall_timeout,
            http_client=http_client,
        )
    if protocol == "openai":
        return OpenAIChatProvider(
            "gpt-test",
            api_key="test-key",
            base_url=base_url or server.openai_base_url,
            max_retries=max_retries,
            backoff_base=0.001,
            backoff_max=0.002,
            stall_timeout=stall_timeout,
            http_client=http_client,
        )
    return OpenAIResponsesProvider(
        "gpt-test",
        api_key="test-key",
        base_url=base_url or server.openai_base_url,
        store=store,
        max_retries=max_retries,
        backoff_base=0.001,
        backoff_max=0.002,
        stall_timeout=stall_timeout,
        http_client=http_client,
    )


def request(
    *messages: Message,
    tools: Sequence[ToolSpec] = (READ_FILE,),
    system: str = "Be brief.",
    budget: RetryBudget | None = None,
) -> ModelRequest:
    return ModelRequest(
        system=system,
        messages=list(messages) or [user_message("hi")],
        tools=tools,
        retry_budget=budget,
    )


@dataclass
class Outcome:
    """Everything one stream produced."""

    events: list[StreamEvent] = field(default_factory=list)
    error: Exception | None = None
    acc: Accumulator = field(default_factory=Accumulator)

    @property
    def message(self) -> Message:
        return self.acc.message()

    @property
    def retries(self) -> list[RetryNotice]:
        return [e for e in self.events if isinstance(e, RetryNotice)]

    def of_type(self, kind: str) -> list[StreamEvent]:
        return [e for e in self.events if e.type == kind]


async def drain(provider: Provider, req: ModelRequest) -> Outcome:
    """All events of one stream, reduced as the loop would; a provider error is kept."""
    outcome = Outcome()
    try:
        async with contextlib.aclosing(provider.stream(req)) as stream:
            async for event in stream:
                outcome.events.append(event)
                outcome.acc.apply(event)
    except Exception as exc:
        outcome.error = exc
    return outcome


async def collect(provider: Provider, req: ModelRequest) -> Outcome:
    """Like :func:`drain`, but the stream must succeed."""
    outcome = await drain(provider, req)
    if outcome.error is not None:
        raise outcome.error
    return outcome


#: The failure bound of a test whose requests must end on their own (they take milliseconds).
BOUND = 20.0


async def turns(provider: Provider, count: int) -> list[Outcome]:
    """``count`` turns on ``provider``, one after the other, each of which must succeed within
    :data:`BOUND`; the provider is closed after them."""
    try:
        async with asyncio.timeout(BOUND):
            return [await collect(provider, request()) for _ in range(count)]
    finally:
        await provider.aclose()


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def http_client(request: pytest.FixtureRequest) -> str:
    """The SDKs' HTTP client of the ``provider`` fixture: ``httpx``, unless a module runs its
    tests on both clients (``pytestmark = ON_BOTH_CLIENTS``)."""
    return str(getattr(request, "param", "httpx"))


#: A module's tests on the SDKs' httpx client and on their aiohttp client (what ``drover
#: serve`` uses when aiohttp is installed): ``pytestmark = ON_BOTH_CLIENTS``.
ON_BOTH_CLIENTS = pytest.mark.parametrize("http_client", HTTP_CLIENTS, indirect=True)


@pytest.fixture
async def proxy() -> AsyncIterator[ForwardProxy]:
    """A running :class:`~.proxy.ForwardProxy` (plain HTTP and CONNECT tunnels)."""
    async with ForwardProxy() as running:
        yield running


@pytest.fixture
async def provider(
    protocol: str, fake_llm: FakeLLMServer, http_client: str
) -> AsyncIterator[Provider]:
    p = make_provider(protocol, fake_llm, http_client=http_client)
    yield p
    await p.aclose()
