"""Shared pieces for loop tests: a provider per wire protocol, all aimed at the fake server."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from drover.channel import EventRecorder
from drover.events import Decision, Event, PermissionRequest
from drover.loop import LoopSettings
from drover.permissions import PermissionPolicy
from drover.providers.anthropic import AnthropicProvider
from drover.providers.base import Provider
from drover.session import AgentSession
from drover.testing.server import FakeLLMServer
from drover.tools.registry import ToolRegistry, default_registry

PROTOCOLS = ["anthropic"]
for _name in ("openai_chat", "openai_responses"):
    if importlib.util.find_spec(f"drover.providers.{_name}") is not None:
        PROTOCOLS.append("openai" if _name == "openai_chat" else "openai-responses")


def make_provider(protocol: str, server: FakeLLMServer) -> Provider:
    knobs = {"api_key": "test-key", "backoff_base": 0.001, "backoff_max": 0.002}
    if protocol == "anthropic":
        return AnthropicProvider("claude-test", base_url=server.anthropic_base_url, **knobs)  # type: ignore[arg-type]
    if protocol == "openai":
        from drover.providers.openai_chat import OpenAIChatProvider

        return OpenAIChatProvider("gpt-test", base_url=server.openai_base_url, **knobs)  # type: ignore[arg-type]
    from drover.providers.openai_responses import OpenAIResponsesProvider

    return OpenAIResponsesProvider("gpt-test", base_url=server.openai_base_url, **knobs)  # type: ignore[arg-type]


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def provider(protocol: str, fake_llm: FakeLLMServer) -> AsyncIterator[Provider]:
    p = make_provider(protocol, fake_llm)
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
