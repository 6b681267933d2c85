"""PROVIDER:MODEL → a provider: names, keys, base URLs."""

from __future__ import annotations

import pytest

from drover.config import Config, parse_model_spec
from drover.errors import ConfigError
from drover.providers.anthropic import AnthropicProvider
from drover.providers.factory import create_provider
from drover.providers.openai_chat import OpenAIChatProvider
from drover.providers.openai_responses import OpenAIResponsesProvider

KEYS = {"anthropic": "a-key", "openai": "o-key", "openai-responses": "o-key"}


@pytest.mark.parametrize(
    ("spec", "kind", "name", "model"),
    [
        ("anthropic:claude-sonnet-4-5", AnthropicProvider, "anthropic", "claude-sonnet-4-5"),
        ("openai:gpt-4.1", OpenAIChatProvider, "openai", "gpt-4.1"),
        ("openai:llama3.1:8b", OpenAIChatProvider, "openai", "llama3.1:8b"),
        ("openai-responses:gpt-5", OpenAIResponsesProvider, "openai-responses", "gpt-5"),
        ("claude-haiku-4-5", AnthropicProvider, "anthropic", "claude-haiku-4-5"),
    ],
)
async def test_specs_pick_the_protocol(spec: str, kind: type, name: str, model: str) -> None:
    provider = create_provider(spec, Config(api_keys=KEYS))
    try:
        assert isinstance(provider, kind)
        assert (provider.name, provider.model) == (name, model)
    finally:
        await provider.aclose()


async def test_a_bare_model_uses_the_default_models_provider() -> None:
    provider = create_provider("gpt-4.1", Config(default_model="openai:gpt-4o", api_keys=KEYS))
    try:
        assert provider.name == "openai"
    finally:
        await provider.aclose()


async def test_aliases() -> None:
    config = Config(aliases={"fast": "openai-responses:gpt-5-mini"}, api_keys=KEYS)
    provider = create_provider("fast", config)
    try:
        assert (provider.name, provider.model) == ("openai-responses", "gpt-5-mini")
    finally:
        await provider.aclose()


def test_unknown_provider() -> None:
    with pytest.raises(ConfigError) as caught:
        create_provider("gemini:pro", Config(api_keys=KEYS))
    assert str(caught.value) == (
        "unknown provider 'gemini' (expected anthropic, openai or openai-responses)"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("anthropic:claude-x", "ANTHROPIC_API_KEY is not set (needed for anthropic:claude-x)"),
        ("openai:gpt-4.1", "OPENAI_API_KEY is not set (needed for openai:gpt-4.1)"),
        ("openai-responses:o3", "OPENAI_API_KEY is not set (needed for openai-responses:o3)"),
    ],
)
def test_a_missing_key_is_one_clear_line(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        create_provider(spec, Config())
    assert str(caught.value) == message


async def test_a_base_url_needs_no_key() -> None:
    provider = create_provider("openai:llama3", Config(), base_url="http://localhost:11434/v1")
    await provider.aclose()
    configured = Config(base_urls={"anthropic": "http://localhost:8080"})
    provider = create_provider("anthropic:local", configured)
    await provider.aclose()


def test_parse_model_spec() -> None:
    assert parse_model_spec("anthropic:claude") == ("anthropic", "claude")
    assert parse_model_spec(" openai : gpt ".replace(" ", "")) == ("openai", "gpt")
    assert parse_model_spec("model-x", "openai") == ("openai", "model-x")
    with pytest.raises(ConfigError, match="no model name"):
        parse_model_spec("openai:")
    with pytest.raises(ConfigError, match="unknown provider 'x'"):
        parse_model_spec("x:y")
