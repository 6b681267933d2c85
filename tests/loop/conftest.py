"""Shared pieces for loop tests: a provider per wire protocol, all aimed at the fake server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from drover.core.events import Decision, Event, PermissionRequest
from drover.core.sinks import EventRecorder
from drover.providers.anthropic import AnthropicProvider
from drover.providers.base import Provider
from drover.providers.openai_chat import OpenAIChatProvider
from drover.providers.openai_responses import OpenAIResponsesProvider
from drover.testing.server import FakeLLMServer
from drover.tools.registry import ToolRegistry, default_registry
from drover.turn.loop import LoopSettings
from drover.turn.permissions import PermissionPolicy
from drover.turn.state import AgentSession

PROTOCOLS = ("anthropic", "openai", "openai-responses")


def make_provider(protocol: str, server: FakeLLMServer, *, store: bool | None = None) -> Provider:
    """A provider for ``protocol`` aimed at the fake server, with near-instant retries.

    ``store=False`` makes the Responses provider send the whole history every time (no
    ``previous_response_id``), for tests that read the history from one request body.
    """
    if protocol == "anthropic":
        return AnthropicProvider(
            "claude-test",
            api_key="test-key",
            base_url=server.anthropic_base_url,
            backoff_base=0.001,
            backoff_max=0.002,
        )
    if protocol == "openai":
        return OpenAIChatProvider(
            "gpt-test",
            api_key="test-key",
            base_url=server.openai_base_url,
            backoff_base=0.001,
            backoff_max=0.002,
        )
    return OpenAIResponsesProvider(
        "gpt-test",
        api_key="test-key",
        base_url=server.openai_base_url,
        store=store,
        backoff_base=0.001,
        backoff_max=0.002,
    )


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def provider(protocol: str, fake_llm: FakeLLMServer) -> AsyncIterator[Provider]:
    p = make_provider(protocol, fake_llm)
    yield p
    await p.aclose()


@pytest.fixture
async def unchained_provider(protocol: str, fake_llm: FakeLLMServer) -> AsyncIterator[Provider]:
    """Sends the whole history in every request body (Responses: no previous_response_id),
    for tests that read the history back from one request."""
    p = make_provider(protocol, fake_llm, store=False)
    yield p
    await p.aclose()


class Answering(EventRecorder):
    """Records events and answers permission requests with a fixed decision."""

    def __init__(self, decision: Decision = "allow") -> None:
        super().__init__()
        self.decision: Decision = decision

    async def send(self, event: Event) -> None:
        await super().send(event)
        if isinstance(event, PermissionRequest):
            event.decide(self.decision)

    def of_type(self, name: str) -> list[Event]:
        return [e for e in self.events if e.type == name]


class Waiting(EventRecorder):
    """Records events and lets a test wait until one matching a predicate arrives."""

    def __init__(self, predicate: Callable[[Event], bool]) -> None:
        super().__init__()
        self.predicate = predicate
        self.seen = asyncio.Event()

    async def send(self, event: Event) -> None:
        await super().send(event)
        if self.predicate(event):
            self.seen.set()


FAST = LoopSettings(stream_retry_delay=0.0)


def new_session(
    provider: Provider,
    workdir: Path,
    *,
    tools: ToolRegistry | None = None,
    policy: PermissionPolicy | None = None,
    settings: LoopSettings = FAST,
) -> AgentSession:
    return AgentSession(
        provider=provider,
        tools=tools if tools is not None else default_registry(),
        workdir=workdir,
        policy=policy or PermissionPolicy("allow"),
        settings=settings,
    )
