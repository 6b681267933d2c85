"""An agent closes what it built (the providers it made, the store it opened) whatever fails,
and every provider a session switched to.

In-process: a leaked provider is not visible from outside a ``drover`` process, so these tests
build the agent with real providers pointed at the fake server and look at their HTTP clients
afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import drover.agent.agent as agent_module
import drover.agent.resources as resources_module
from drover.agent.agent import Agent
from drover.config.settings import load_config
from drover.errors import DroverError
from drover.providers.anthropic import AnthropicProvider
from drover.providers.base import Provider
from drover.testing.server import FakeLLMServer


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Provider]:
    """Every provider the agent builds."""
    built: list[Provider] = []
    real = resources_module.create_provider

    def spy(*args: object, **kwargs: object) -> Provider:
        provider = real(*args, **kwargs)  # type: ignore[arg-type]
        built.append(provider)
        return provider

    monkeypatch.setattr(resources_module, "create_provider", spy)  # the agent's own
    monkeypatch.setattr(agent_module, "create_provider", spy)  # a session's /model
    return built


@pytest.mark.parametrize(
    ("db", "workdir"),
    [
        ("mysql://nowhere/x", "."),  # no such journal backend
        (".", "."),  # a directory is no SQLite file
    ],
)
async def test_the_provider_is_closed_when_the_agent_cannot_open(
    fake_llm: FakeLLMServer, tmp_path: Path, made: list[Provider], db: str, workdir: str
) -> None:
    store = db if "://" in db else str(tmp_path / db)
    agent = Agent(
        "anthropic:test",
        base_url=fake_llm.base_url,
        store=store,
        workdir=tmp_path / workdir,
        config=load_config(),
    )
    with pytest.raises(DroverError):
        async with agent:
            pytest.fail("the agent opened")
    (provider,) = made
    assert isinstance(provider, AnthropicProvider) and provider._client.is_closed()


async def test_a_missing_workdir_fails_before_anything_is_built(
    tmp_path: Path, made: list[Provider]
) -> None:
    agent = Agent("anthropic:test", store=str(tmp_path / "j.db"), workdir=tmp_path / "missing")
    with pytest.raises(DroverError, match="working directory does not exist"):
        await agent.open()
    assert made == []


async def test_every_provider_a_session_used_is_closed(
    fake_llm: FakeLLMServer, tmp_path: Path, made: list[Provider]
) -> None:
    agent = Agent(
        "anthropic:test",
        base_url=fake_llm.base_url,
        store=str(tmp_path / "j.db"),
        workdir=tmp_path,
        config=load_config(),
    )
    async with agent:
        session = await agent.session()
        await session.switch_model("anthropic:other")
        assert session.model == "anthropic:other"
        _first, second = made
        assert isinstance(second, AnthropicProvider) and not second._client.is_closed()
        assert str(second._client.base_url).rstrip("/") == fake_llm.base_url.rstrip("/")
        assert session.engine.provider is second
    assert all(isinstance(p, AnthropicProvider) and p._client.is_closed() for p in made)
